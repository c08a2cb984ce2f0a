//! The shapes written to and read from an index file: its header, its section table, the
//! fixed-size records of the columns that are not plain numbers, and the JSON of the small
//! parts. `write.rs` and `read.rs` share them, so the two cannot drift apart.

use crate::analysis::Summary;
use crate::analysis::replay::{Allocation, Origin};
use crate::snapshot::{Annotation, Segment, SourceInfo, StackId};
use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};

/// The first bytes of every index file.
pub(super) const MAGIC: [u8; 8] = *b"SNAPIDX\0";

/// Every section starts at a multiple of this: more than any column's alignment, and a cache
/// line, so a column read never straddles one needlessly.
pub(super) const ALIGN: u64 = 64;

/// The most sections a file may declare (a few per device): bounds the table read on open.
pub(super) const MAX_SECTIONS: u32 = 1 << 16;

/// The fixed start of the file.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(super) struct Header {
    pub(super) magic: [u8; 8],
    pub(super) version: u32,
    pub(super) sections: u32,
    pub(super) blob_bytes: u64,
    /// The snapshot id's 16 hex digits.
    pub(super) blob_id: [u8; 16],
    /// The whole file's size: a file cut short (or grown) is found before any section is read.
    pub(super) file_bytes: u64,
    /// xxh3 of the header (with this field 0) and the section table.
    pub(super) checksum: u64,
    pub(super) reserved: u64,
}

pub(super) const HEADER_BYTES: u64 = std::mem::size_of::<Header>() as u64;

/// One row of the section table.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(super) struct SectionEntry {
    pub(super) kind: u32,
    /// The trace's or device's position (0 for the JSON section).
    pub(super) part: u32,
    pub(super) offset: u64,
    pub(super) bytes: u64,
    /// xxh3 of the section's bytes.
    pub(super) checksum: u64,
}

pub(super) const ENTRY_BYTES: u64 = std::mem::size_of::<SectionEntry>() as u64;

/// What a section holds. Trace columns are per trace (`part` = device ordinal, the position
/// in `Snapshot::device_traces`); replay columns per analysed device (`part` = the position in
/// `Analysis::devices`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum Kind {
    Meta = 1,
    TraceAction = 10,
    TraceAddr,
    TraceSize,
    TraceStream,
    TraceTime,
    TraceStack,
    TraceCompileContext,
    TraceUserMetadata,
    TraceCategory,
    Allocated = 30,
    EventAllocation,
    LevelFirst,
    BucketFirst,
    ByStart,
    ByEnd,
    FreedWithoutAlloc,
    Ghosts,
    Allocations,
    ReservedSteps,
}

/// An [`Allocation`] as a fixed-size record: its `Option`s and enum as a flags word. The
/// replay's `Vec<Allocation>` is rebuilt from these on open (one pass; see `read.rs`) rather
/// than mapped, so every reader of `replay.allocations` keeps its `Option` fields.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(super) struct StoredAllocation {
    addr: u64,
    size: u64,
    stream: u64,
    stack: StackId,
    start: u32,
    end: u32,
    version: u32,
    /// Bits 0-1: the origin; bit 2: `start` is set; bit 3: `end` is set.
    flags: u32,
    padding: u32,
}

const HAS_START: u32 = 1 << 2;
const HAS_END: u32 = 1 << 3;

impl From<&Allocation> for StoredAllocation {
    fn from(allocation: &Allocation) -> Self {
        let origin = match allocation.origin {
            Origin::Traced => 0,
            Origin::FreedWithoutAlloc => 1,
            Origin::Ghost => 2,
        };
        let flags = origin
            | if allocation.start.is_some() {
                HAS_START
            } else {
                0
            }
            | if allocation.end.is_some() { HAS_END } else { 0 };
        Self {
            addr: allocation.addr,
            size: allocation.size,
            stream: allocation.stream,
            stack: allocation.stack,
            start: allocation.start.unwrap_or(0),
            end: allocation.end.unwrap_or(0),
            version: allocation.version,
            flags,
            padding: 0,
        }
    }
}

impl StoredAllocation {
    pub(super) fn to_allocation(self) -> Option<Allocation> {
        let origin = match self.flags & 3 {
            0 => Origin::Traced,
            1 => Origin::FreedWithoutAlloc,
            2 => Origin::Ghost,
            _ => return None,
        };
        Some(Allocation {
            addr: self.addr,
            size: self.size,
            stream: self.stream,
            stack: self.stack,
            start: (self.flags & HAS_START != 0).then_some(self.start),
            end: (self.flags & HAS_END != 0).then_some(self.end),
            version: self.version,
            origin,
        })
    }
}

/// One step of the reserved-memory curve (`(event, bytes)` in the replay).
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(super) struct StoredStep {
    pub(super) event: u32,
    pub(super) padding: u32,
    pub(super) bytes: u64,
}

/// The small parts, as one JSON section.
#[derive(Serialize, Deserialize)]
pub(super) struct Meta {
    /// The build that wrote it: an index from another build of snapview is rebuilt, since the
    /// replay's rules or the summary may have changed without a format change.
    pub(super) snapview_version: String,
    /// [`crate::analysis::roles::UserRules::fingerprint`] of the rules the summary was made with.
    pub(super) rules_fingerprint: u64,
    pub(super) segments: Vec<Segment>,
    pub(super) allocator_settings: serde_json::Value,
    pub(super) external_annotations: Vec<Annotation>,
    pub(super) unknown_keys: Vec<String>,
    /// Frames in id order: `(filename, line, name)`.
    pub(super) frames: Vec<(String, u64, String)>,
    /// Stacks from id 1 on (0 is the empty stack), as frame ids.
    pub(super) stacks: Vec<Vec<u32>>,
    pub(super) source: SourceInfo,
    pub(super) traces: Vec<TraceMeta>,
    pub(super) devices: Vec<DeviceMeta>,
    pub(super) summary: Summary,
    /// Per summary device, the stack ids of `top_stacks_at_peak` (which its JSON skips).
    pub(super) top_stack_ids: Vec<Vec<StackId>>,
}

/// A trace's side tables.
#[derive(Serialize, Deserialize)]
pub(super) struct TraceMeta {
    pub(super) events: usize,
    /// The distinct streams when the stream section holds a byte per event indexing them;
    /// `None` when it holds the raw `u64`s (a trace of more than 256 streams).
    pub(super) streams: Option<Vec<u64>>,
    /// `(event, bytes)` of the sizes of 4 GiB or more (the size section holds `u32`s).
    pub(super) large_sizes: Vec<(usize, u64)>,
    /// A base per 65,536 events when the time section holds `u32` offsets from them; `None`
    /// when it holds the raw `i64`s.
    pub(super) time_bases: Option<Vec<i64>>,
    pub(super) strings: Vec<String>,
    pub(super) device_free: Vec<(usize, u64)>,
    pub(super) unknown_actions: Vec<String>,
    pub(super) categories: Vec<String>,
    pub(super) has_time: bool,
}

/// A replayed device's numbers that are not columns.
#[derive(Serialize, Deserialize)]
pub(super) struct DeviceMeta {
    pub(super) device: usize,
    pub(super) allocated_at_start: u64,
    pub(super) reserved_at_start: u64,
    pub(super) allocations: usize,
}
