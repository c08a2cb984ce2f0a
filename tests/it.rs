//! The integration tests, one crate: each `tests/NAME.rs` below is a module of it, with the helpers
//! of `tests/common` shared. One crate links once: 35 test binaries, each linking the whole server,
//! took about 385 CPU-seconds to build (over three minutes on two cores); as one crate, 63. The
//! tests that must have a process of their own stay their own crates ([[test]] in Cargo.toml):
//! those that count every allocation of the process (`hostile_input`, `replay_memory`,
//! `decompress_ahead`, `fuzz`), the browser tests (which time the pages with nothing else running
//! beside them) and the load tests (run alone, one at a time).
//!
//! `cargo test --release --test it server_api::` runs one file's tests.

mod common;

mod access_crates;
mod analysis_oracle;
mod api_contract;
mod cli;
mod compare;
mod compare_pages;
mod decompress_in_parallel;
mod docs_match;
mod event_stack;
mod findings;
mod import;
mod index_files;
mod login_redirect;
mod ops;
mod parallel;
mod reader_facts;
mod replicas_local;
mod replicas_shared;
mod roles_labelled;
mod rules_nesting;
mod segment_history;
mod server_access;
mod server_api;
mod server_cold;
mod server_edges;
mod server_hardening;
mod server_memory;
mod server_roles;
mod server_slots;
mod server_store;
mod server_tcp;
mod stored_index;
mod torch_text;
mod upload_redirects;
mod views_api;
