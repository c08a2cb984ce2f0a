//! The shapes written to and read from an index file: its header, its section table, the
//! fixed-size records of the columns that are not plain numbers, and the JSON of the small
//! parts. `write.rs` and `read.rs` share them, so the two cannot drift apart.

use crate::analysis::Summary;
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
    /// A base per 64 events, when the time section holds `u16` offsets from them.
    TraceTimeBases,
    /// The replay's curve: its total before every 64th event.
    AllocatedBeforeStep = 30,
    /// The replay's events that open an allocation, a bit each (see
    /// `analysis::replay::EventAllocations`).
    EventOpens,
    LevelFirst,
    BucketFirst,
    ByStart,
    ByEnd,
    FreedWithoutAlloc,
    Ghosts,
    ReservedSteps,
    AllocationAddr,
    AllocationSize,
    AllocationStream,
    AllocationStack,
    AllocationStart,
    AllocationEnd,
    AllocationVersion,
    AllocationOrigin,
    /// The events that close an allocation, a bit each, and the allocation of each.
    EventCloses,
    ClosedAllocations,
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
    /// A base address per 65,536 events (the address section holds `i32` offsets from them in
    /// 512-byte units), and `(event, address)` of the addresses that do not fit one.
    pub(super) addr_bases: Vec<u64>,
    /// Whether the stack section holds `u32` ids rather than `u16`s.
    pub(super) wide_stacks: bool,
    pub(super) addrs_aside: Vec<(usize, u64)>,
    /// A base per 65,536 events when the time section holds `u32` offsets from them; `None`
    /// when it holds `u16` offsets (`times_aside` is there) or the raw `i64`s.
    pub(super) time_bases: Option<Vec<i64>>,
    /// When the time section holds `u16` offsets from the bases of the time bases section:
    /// `(event, time)` of the times that fit no offset.
    pub(super) times_aside: Option<Vec<(usize, i64)>>,
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
    /// The curve's highest total and the event that first reached it (found once, by a pass
    /// over every event).
    pub(super) allocated_peak: (u64, Option<usize>),
    pub(super) reserved_at_start: u64,
    pub(super) allocations: usize,
    /// The allocations' distinct streams, or `None` for raw `u64`s (as in [`TraceMeta`]).
    pub(super) allocation_streams: Option<Vec<u64>>,
    /// `(allocation, bytes)` of the sizes of 4 GiB or more.
    pub(super) allocation_large_sizes: Vec<(usize, u64)>,
    /// The allocations' addresses as the trace's are stored (see [`TraceMeta`]): a base per
    /// 65,536 allocations and `(allocation, address)` of those that fit no offset.
    pub(super) allocation_addr_bases: Vec<u64>,
    pub(super) allocation_addrs_aside: Vec<(usize, u64)>,
    /// Whether the allocation stack section holds `u32` ids rather than `u16`s.
    pub(super) allocation_wide_stacks: bool,
    /// The replay's frees that waited on another stream: `(request event, allocation)`. Few
    /// (only `record_stream` frees wait), so JSON rather than a column.
    pub(super) pending_requests: Vec<(u32, u32)>,
}
