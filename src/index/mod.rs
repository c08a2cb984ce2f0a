//! The stored index: what the first read of a snapshot computed (its trace columns, the replay,
//! the summary), written beside its blob as one columnar file and memory-mapped when opened,
//! so a restart (or a second server on the same folder) opens a stored snapshot without
//! reading its pickle, and the OS page cache, not the heap, holds the cold columns.
//!
//! It is a derived, local cache: anything wrong with it (missing, short, corrupt, of another
//! format version or another build of snapview, made from other bytes) makes [`open`] refuse
//! it with the reason, and the caller reads the pickle again and writes a new one.
//!
//! The file, every number little-endian (a big-endian machine reads a wrong version and
//! rebuilds):
//!
//! ```text
//! header     64 bytes: magic, FORMAT_VERSION, section count, the blob's byte size and id,
//!            the file's byte size, the xxh3 of the header and section table
//! sections   32 bytes each: kind, part (device), offset, length, xxh3 of the section's bytes
//! section*   each at a 64-byte aligned offset, so a column maps as `&[T]` in place:
//!            the raw columns of each trace and replay, and one JSON section (`Meta`) with the
//!            small parts: segments, frames, stacks, strings, annotations, allocator settings,
//!            source info, the summary and the hash of the role rules it was made with
//! ```
//!
//! Checksums: [`open`] checks the header, the section table and the JSON section always; the
//! columns' checksums with [`Verify::Everything`] (see [`Verify`] for what that costs), or
//! afterwards with [`verify_sections`], which the server runs in the background after a cold
//! open (`server/stored_index.rs`).

mod layout;
mod read;
#[cfg(test)]
mod tests;
mod write;

pub use read::{Opened, open, open_regular, verify_sections};
pub use write::write;

/// Bump when anything stored changes shape or meaning (a column's type, the replay's rules,
/// what the summary holds, the roles and findings it was made with: 4 came with the roles of
/// issue 19; 5 with the replay's pending frees of issue 20; 6 with the replay's curve kept per
/// 64 events and its events' allocations as bits, issue 23): an index of another version is
/// rebuilt, never read.
pub const FORMAT_VERSION: u32 = 7;

/// Where a snapshot's index is, for a blob id: the store decides the folder.
pub const FILE_SUFFIX: &str = ".snapidx";

/// What an index was made from: the blob's id and byte size. An index for other bytes (the
/// same id with another size cannot happen short of a hash collision or a hand-edited folder)
/// is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobIdentity<'a> {
    /// The snapshot id (16 hex digits).
    pub id: &'a str,
    pub bytes: u64,
}

/// How much of an index [`open`] checks against its checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Every section: reads the whole file once (about 0.1 s a GB from the page cache, the
    /// disk's speed when cold).
    Everything,
    /// The header, the section table and the JSON section, and every column's bounds,
    /// alignment and length; the columns' bytes are read only when a question needs them.
    /// A column corrupted on disk after it was written then goes unnoticed (answers read its
    /// numbers as they are; every index into another column is bounds-checked, so the worst is
    /// a wrong answer or a failed request, never unsafety).
    Structure,
}

/// Why an index was not used: each says what to log before rebuilding it.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("there is no index file")]
    Missing,
    #[error("reading the index: {0}")]
    Io(#[from] std::io::Error),
    #[error("not an index file (bad magic)")]
    BadMagic,
    #[error("index format version {found}, this program reads {FORMAT_VERSION}")]
    Version { found: u32 },
    #[error("the index was made by snapview {found}, this is {}", env!("CARGO_PKG_VERSION"))]
    Build { found: String },
    #[error("the index was made from other bytes ({found})")]
    OtherBlob { found: String },
    /// Something else sits at the index's path (put there by hand, or by someone else).
    #[error("the index path holds {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("the file is {actual} bytes, its header says {expected}: cut short or grown")]
    Length { expected: u64, actual: u64 },
    #[error("checksum mismatch in {0}")]
    Checksum(String),
    #[error("malformed index: {0}")]
    Malformed(String),
}

impl IndexError {
    fn malformed(what: impl std::fmt::Display) -> Self {
        Self::Malformed(what.to_string())
    }
}
