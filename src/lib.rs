//! snapview: look inside PyTorch CUDA memory snapshots.
//!
//! The pipeline, one module per stage:
//!
//! ```text
//! bytes ──► pickle ──────────► snapshot ───────► analysis ──────► cli / server
//!           (restricted VM,     (typed model,      (replay, peaks,    (text, JSON,
//!            no code runs)       columnar trace)    live sets, maps)   pages)
//!                                    ▲                  │
//!                                    └──── index ◄──────┘  (server: written after the first
//!                                     (mapped columns)       read, opened on the next)
//! ```
//!
//! - [`pickle`] decodes the data opcodes of Python's pickle and refuses anything that would run
//!   code; it keeps memo identity so shared frames stay shared.
//! - [`snapshot`] turns decoded values into PyTorch's nouns (segments, blocks, trace entries,
//!   frames), tolerant of every torch version; [`snapshot::load_path`] reads a file end to end.
//! - [`analysis`] is pure: allocator replay with PyTorch's viewer's rules, memory over time,
//!   the live set and its stack tree at any event, the timeline at a level of detail, flame
//!   graphs, segment maps at any event, OOM reports, diffs and data-quality notes.
//! - [`index`] stores what the first read of a snapshot computed (trace columns, replay,
//!   summary) as one columnar file beside its blob, memory-mapped when opened: the server opens
//!   a stored snapshot from it after a restart without reading the pickle, and rebuilds it
//!   whenever it is missing or not to be trusted. The numeric columns are
//!   [`snapshot::Column`]s, owned when parsed and windows of the map when opened.
//! - [`torch_text`] prints what torch's own `_memory_viz.py` prints, byte for byte.
//! - [`server`] is `snapview serve`: a store (blobs + SQLite), uploads parsed as they stream in,
//!   an analysis cache, the JSON API and the pages (`templates/`, `static/`).
//! - [`cli`] is the command line; it only parses arguments and calls the library; [`format`](mod@format)
//!   writes numbers for people; [`threads`] shares a stage's work out to the cores `--threads`
//!   allows.

// `pub` only for the library's API (what tests, benches and the binary use); the rest is
// pub(crate), so the compiler sees what is dead.
#![warn(unreachable_pub)]

pub mod analysis;
pub mod cli;
pub mod format;
pub mod index;
pub mod pickle;
pub mod server;
pub mod snapshot;
pub mod threads;
pub mod torch_text;
