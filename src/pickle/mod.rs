//! A restricted pickle machine: it decodes data and never runs code.
//!
//! Python's `pickle` is a small stack language whose GLOBAL/REDUCE opcodes import and call
//! arbitrary functions. A memory snapshot needs none of them, so this machine implements only the
//! data opcodes of protocols 2 to 5 and refuses the rest with the opcode's name and byte offset.
//!
//! Untrusted input is bounded throughout ([`Limits`]): lengths are checked against the bytes that
//! actually arrive (a declared 4 GB string in a 1 KB file fails at the end of the file, having read
//! 1 KB), memo indices beyond the dense range go to a sparse map, nesting depth is capped, a
//! single string or bytes object may not declare more than [`MAX_STRING_BYTES`], and decompressed
//! input is capped both absolutely and by its ratio to the compressed bytes, so a gzip or zstd
//! bomb stops after a few MB.
//!
//! Memo identity is kept: a value fetched from the memo is the same heap object, so a frame dict
//! referenced 100k times is decoded once. A [`Compactor`] may replace records as they are appended
//! to a list (the snapshot model uses this to turn millions of trace-entry dicts into columns
//! while reading), which keeps memory proportional to the distinct data, not to the references.

mod input;
mod machine;
pub mod scan;
mod value;

pub use input::{
    CHUNK_HEADROOM, Chunks, Encoding, Landed, Landing, LandingReader, Limits, MAX_STRING_BYTES,
    detect_encoding,
};
pub(crate) use input::{Capped, CompressedCount, io_error};
pub use machine::{
    Compactor, Decoded, MachineState, Splice, SpliceOp, decode, decode_chunks, decode_in_memory,
};
pub use value::{CountedBlock, Heap, Kind, Memo, Value};

/// Why a file could not be read as a snapshot. Messages name the byte offset (in the
/// decompressed pickle stream) and say what was wrong in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    #[error(
        "byte {offset}: opcode {name} would import or call Python code; snapview reads data only and refuses it (this file is not a plain memory snapshot)"
    )]
    CodeOpcode { offset: u64, name: &'static str },
    #[error(
        "byte {offset}: unknown pickle opcode 0x{opcode:02x}; the file is corrupt or not a pickle"
    )]
    UnknownOpcode { offset: u64, opcode: u8 },
    #[error("byte {offset}: {message}")]
    Malformed { offset: u64, message: String },
    #[error(
        "the file ends early: byte {offset} starts {what}, which needs {needed} more bytes (the file is truncated)"
    )]
    Truncated {
        offset: u64,
        what: &'static str,
        needed: u64,
    },
    #[error(
        "decompressed data exceeds the limit of {limit} bytes; refusing it (a compression bomb, or raise the limit)"
    )]
    DecompressedTooLarge { limit: u64 },
    #[error(
        "decompressed data grows more than {ratio} times its compressed size ({compressed} compressed bytes gave {decompressed}); real snapshots compress less than 50:1, so this is refused as a compression bomb"
    )]
    ExpansionTooHigh {
        ratio: u64,
        compressed: u64,
        decompressed: u64,
    },
    #[error(
        "byte {offset}: {what} declares {declared} bytes, more than the {limit} bytes any single string in a memory snapshot needs; refusing it before reading"
    )]
    StringTooLong {
        offset: u64,
        what: &'static str,
        declared: u64,
        limit: u64,
    },
    #[error("{0}")]
    NotASnapshot(String),
    /// The [`Compactor`] stopped decoding; it keeps the reason.
    #[error("reading was stopped by a limit")]
    Stopped,
    #[error("reading failed: {0}")]
    Io(#[from] std::io::Error),
}

impl PickleError {
    pub(crate) fn malformed(offset: u64, message: impl Into<String>) -> Self {
        Self::Malformed {
            offset,
            message: message.into(),
        }
    }
}
