//! The snapshot model: PyTorch's own nouns, typed and tolerant.
//!
//! A [`Snapshot`] is what `torch.cuda.memory._snapshot()` returns: the allocator's segments and
//! blocks at the moment of the dump, plus one trace of events per device. Traces are stored
//! column-wise ([`Trace`]) because a long run records millions of events; frames and stacks are
//! interned ([`FrameTable`], [`StackTable`]) because the same few hundred frames repeat in every
//! event.
//!
//! Building a model from decoded pickle values lives in `build` (with `compact`, which runs while
//! the pickle is decoded); the JSON form in `json`.

mod build;
mod column;
mod compact;
mod convert;
mod follow;
mod frames;
mod json;
mod load;
mod narrow;
mod trace;

pub use column::{Column, SharedMap, WindowError};
pub use compact::parallel::{Parallel, parallel_splices};
pub use convert::ShapeError;
pub use follow::{FollowedEvent, FollowerOutcome, TraceFollower};
pub(crate) use frames::short_frame_label;
pub use frames::{Frame, FrameId, FrameLabel, FrameTable, StackId, StackTable};
pub use load::{
    DEFAULT_MAX_EVENTS, EVENTS_PER_CHARGE, EventGate, LoadError, LoadOptions, Refusal,
    WithFollowerOutcome, compressed_decoded_in_parallel, decodes_in_parallel, default_threads,
    frames_decompressed_in_parallel, load_compressed_in_parallel, load_compressed_landing,
    load_landing_following, load_landing_mapped, load_path, load_path_following, load_reader,
    load_reader_following, load_slice_following, set_default_threads,
};
pub use narrow::{AddrColumn, SizeColumn, SparseIds, StackColumn, StreamColumn, TimeColumn};
pub(crate) use narrow::{blocked_times, narrow_times};
pub use trace::{Action, ActionCode, Trace, TraceEntry};

use serde::{Deserialize, Serialize};

/// One decoded snapshot.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    /// One trace per device ordinal (index = device), empty where nothing was recorded.
    pub device_traces: Vec<Trace>,
    /// `allocator_settings` as JSON (torch >= 2.4); `Null` when the file has none.
    pub allocator_settings: serde_json::Value,
    pub external_annotations: Vec<Annotation>,
    /// Top-level keys this version of snapview does not know, kept by name.
    pub unknown_keys: Vec<String>,
    pub frames: FrameTable,
    pub stacks: StackTable,
    pub source: SourceInfo,
}

/// Where a snapshot came from: encoding details that explain its shape.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SourceInfo {
    /// Pickle protocol (2-5), or `None` for the JSON form.
    pub pickle_protocol: Option<u8>,
    pub compression: Compression,
    /// The file is the bare list of segments written by torch 1.13.
    pub legacy_segment_list: bool,
    /// Blocks carried a legacy `history` list instead of `frames`/`requested_size`.
    pub legacy_block_history: bool,
    /// The device ordinal given to pinned host memory (`host_segments`/`host_traces`, read as
    /// one more device after the CUDA ones); `None` when the file recorded none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_device: Option<usize>,
    /// Bytes of pickle decoded (after decompression); 0 for the JSON form and when opened from
    /// a stored index. What a stored index's size is bounded by (`src/server/stored_index.rs`).
    #[serde(skip)]
    pub decoded_bytes: u64,
}

impl SourceInfo {
    /// How pages and commands name a device: `host (pinned)` for pinned host memory, else
    /// `cuda:N`.
    pub fn device_label(&self, device: usize) -> String {
        if self.host_device == Some(device) {
            HOST_LABEL.to_owned()
        } else {
            format!("cuda:{device}")
        }
    }
}

/// The name of pinned host memory as a device, in every page and command.
pub const HOST_LABEL: &str = "host (pinned)";

#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Zstd,
}

/// One `cudaMalloc`'d range (or one expandable range) with the blocks carved out of it.
/// (`Serialize`/`Deserialize` are for the stored index's small section.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    /// Raw `cudaStream_t` value; 0 is the default stream.
    pub stream: u64,
    /// `large` or `small` (kept verbatim).
    pub segment_type: String,
    /// `(0, 0)` is the default pool; anything else is a private pool (CUDA graphs, `MemPool`).
    pub pool_id: (i64, i64),
    pub is_expandable: bool,
    /// Stack of the `cudaMalloc` (often empty).
    pub stack: StackId,
    /// Blocks in address order; their sizes sum to `total_size`.
    pub blocks: Vec<Block>,
}

/// A piece of a segment: handed to a tensor, waiting to be freed, or cached free space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub address: u64,
    /// Rounded size, as the allocator carved it.
    pub size: u64,
    /// What the caller asked for; `size - requested_size` is rounding waste.
    pub requested_size: u64,
    pub state: BlockState,
    pub stack: StackId,
}

/// Stored by its name (see [`BlockState::name`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum BlockState {
    /// Held by a tensor.
    ActiveAllocated,
    /// Freed by its tensor but waiting on another stream (`record_stream`).
    ActivePendingFree,
    /// Cached free space.
    Inactive,
    /// A state name this version does not know, kept verbatim.
    Unknown(String),
}

impl From<String> for BlockState {
    fn from(name: String) -> Self {
        Self::parse_known(&name).unwrap_or(Self::Unknown(name))
    }
}

impl From<BlockState> for String {
    fn from(state: BlockState) -> Self {
        state.name().to_owned()
    }
}

impl BlockState {
    pub fn parse(name: &str) -> Self {
        Self::parse_known(name).unwrap_or_else(|| Self::Unknown(name.to_owned()))
    }

    /// The state `name` names, if it is one torch writes (no copy of an unknown name).
    pub fn parse_known(name: &str) -> Option<Self> {
        match name {
            "active_allocated" => Some(Self::ActiveAllocated),
            // torch's docstring says `active_awaiting_free`; its code writes `active_pending_free`.
            "active_pending_free" | "active_awaiting_free" => Some(Self::ActivePendingFree),
            "inactive" => Some(Self::Inactive),
            _ => None,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Self::ActiveAllocated => "active_allocated",
            Self::ActivePendingFree => "active_pending_free",
            Self::Inactive => "inactive",
            Self::Unknown(name) => name,
        }
    }
}

/// An `external_annotations` entry, e.g. the START/END of a `record_function` range.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Annotation {
    pub device: i64,
    pub time_us: i64,
    /// `stage`, `name` and any other string fields, sorted by key.
    pub fields: std::collections::BTreeMap<String, String>,
}

impl Snapshot {
    /// Devices that have either segments or a non-empty trace, in ordinal order.
    pub fn devices(&self) -> Vec<usize> {
        let mut devices: Vec<usize> = self
            .device_traces
            .iter()
            .enumerate()
            .filter(|(_, trace)| !trace.is_empty())
            .map(|(device, _)| device)
            .collect();
        for segment in &self.segments {
            if let Ok(device) = usize::try_from(segment.device) {
                devices.push(device);
            }
        }
        devices.sort_unstable();
        devices.dedup();
        devices
    }

    /// The trace of `device`, or an empty one.
    pub fn trace(&self, device: usize) -> &Trace {
        static EMPTY: std::sync::OnceLock<Trace> = std::sync::OnceLock::new();
        self.device_traces
            .get(device)
            .unwrap_or_else(|| EMPTY.get_or_init(Trace::default))
    }

    /// The heap bytes this snapshot holds (its share of the analysis cache's byte budget): the
    /// numeric columns and vectors by the capacities allocated (a mapped column holds none),
    /// the texts, interned frames and stacks by count (a trace repeats a few thousand of them,
    /// so they are small). Every field is named below, so a new one does not compile until it
    /// is counted here (or said to hold nothing worth counting).
    pub fn heap_bytes(&self) -> u64 {
        let Snapshot {
            segments,
            device_traces,
            allocator_settings: _,
            external_annotations,
            unknown_keys: _,
            frames,
            stacks,
            source: _,
        } = self;
        let segment_bytes = vec_bytes(segments)
            + segments
                .iter()
                .map(|segment| vec_bytes(&segment.blocks) + segment.segment_type.capacity() as u64)
                .sum::<u64>();
        let annotation_bytes = vec_bytes(external_annotations)
            + external_annotations
                .iter()
                .map(|annotation| annotation.fields.len() as u64 * PER_TABLE_ENTRY)
                .sum::<u64>();
        vec_bytes(device_traces)
            + device_traces.iter().map(Trace::heap_bytes).sum::<u64>()
            + segment_bytes
            + annotation_bytes
            + (frames.len() + stacks.len()) as u64 * PER_TABLE_ENTRY
    }

    /// Segments of `device`, in file order.
    pub fn device_segments(&self, device: usize) -> impl Iterator<Item = &Segment> {
        self.segments
            .iter()
            .filter(move |segment| usize::try_from(segment.device).ok() == Some(device))
    }
}

/// Heap bytes counted per text, interned frame or stack, or map entry: the text or frame ids,
/// and the index entry.
pub(crate) const PER_TABLE_ENTRY: u64 = 128;

/// Heap bytes a vector holds (its capacity).
pub(crate) fn vec_bytes<T>(vector: &Vec<T>) -> u64 {
    (vector.capacity() * std::mem::size_of::<T>()) as u64
}
