//! A device's event trace, stored column-wise.
//!
//! A long training run records millions of events; as parallel vectors they cost ~40 bytes each
//! and no heap objects. Rare fields (the `oom` event's `device_free`, unknown action names) live in
//! side tables.

use super::narrow::{AddrColumn, SizeColumn, SparseIds, StackColumn, StreamColumn, TimeColumn};
use super::{Column, StackId};
use serde::Serialize;
use std::collections::BTreeMap;

/// What the allocator did at one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    /// An action this version does not know (e.g. `user_defined` from 2024 nightlies), kept by name.
    Unknown(String),
}

/// The compact form of an [`Action`] stored in a trace column: known actions are 0-8, unknown ones
/// index the trace's table of unknown names from [`ActionCode::FIRST_UNKNOWN`] on.
/// Plain data (`Pod`), so a stored index maps the column as it is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, bytemuck::Pod, bytemuck::Zeroable,
)]
#[repr(transparent)]
pub struct ActionCode(pub u8);

impl ActionCode {
    pub const ALLOC: Self = Self(0);
    pub const FREE_REQUESTED: Self = Self(1);
    pub const FREE_COMPLETED: Self = Self(2);
    pub const SEGMENT_ALLOC: Self = Self(3);
    pub const SEGMENT_FREE: Self = Self(4);
    pub const SEGMENT_MAP: Self = Self(5);
    pub const SEGMENT_UNMAP: Self = Self(6);
    pub const SNAPSHOT: Self = Self(7);
    pub const OOM: Self = Self(8);
    pub const FIRST_UNKNOWN: u8 = 9;

    const KNOWN: [&'static str; 9] = [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "snapshot",
        "oom",
    ];

    /// The code of a known action name.
    pub fn known(name: &str) -> Option<Self> {
        Self::KNOWN
            .iter()
            .position(|known| *known == name)
            .map(|i| Self(i as u8))
    }

    pub fn is_known(self) -> bool {
        self.0 < Self::FIRST_UNKNOWN
    }
}

/// One event, assembled from the columns (for display; hot loops read the columns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEntry {
    pub action: Action,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub time_us: i64,
    pub stack: StackId,
    pub compile_context: Option<String>,
    pub user_metadata: Option<String>,
    pub device_free: Option<u64>,
}

/// The events of one device, column-wise, in recorded order. The numeric columns are
/// [`Column`]s: owned when parsed, mapped when opened from a stored index.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    pub action: Column<ActionCode>,
    /// Block or segment address (0 for `oom`): read it with `addr.get(i)`.
    pub addr: AddrColumn,
    /// Requested bytes for `alloc`/frees; segment bytes for `segment_*`.
    pub size: SizeColumn,
    /// The CUDA stream (raw `cudaStream_t`; 0 is the default stream): read it with
    /// [`Trace::stream`].
    pub stream: StreamColumn,
    /// Microseconds since the Unix epoch (torch >= 2.2); 0 when absent.
    pub time_us: TimeColumn,
    /// Read it with `stack.get(i)`.
    pub stack: StackColumn,
    /// Index into [`Trace::strings`] of `compile_context`; 0 = absent or `N/A`.
    pub compile_context: SparseIds,
    /// Index into [`Trace::strings`] of `user_metadata`; 0 = absent or empty.
    pub user_metadata: SparseIds,
    /// Distinct `compile_context` / `user_metadata` texts; entry 0 is the empty string.
    pub strings: Vec<String>,
    /// `device_free` of `oom` events, by event index.
    pub device_free: BTreeMap<usize, u64>,
    /// Names of unknown actions; code `FIRST_UNKNOWN + i` is `unknown_actions[i]`.
    pub unknown_actions: Vec<String>,
    /// By event: index into [`Trace::categories`] of the entry's `category` (torch's profiler
    /// labels each entry with one; 0 = none). Empty when no entry carries one, as in every
    /// snapshot `_record_memory_history` writes, so it costs nothing there; shorter than the
    /// trace when only earlier entries carry one.
    pub category: Column<u8>,
    /// Distinct `category` texts; entry 0 is "none".
    pub categories: Vec<String>,
    /// Whether any entry carried `time_us`.
    pub has_time: bool,
}

impl Trace {
    pub fn len(&self) -> usize {
        self.action.len()
    }

    /// The indices of the events of `action`, in order. (A search of the bytes: a walk of
    /// the ten-times trace's 32 million actions for its few `oom` ones took 30-40 ms.)
    pub fn events_of(&self, action: ActionCode) -> impl Iterator<Item = usize> + '_ {
        memchr::memchr_iter(action.0, bytemuck::cast_slice(&self.action))
    }

    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    /// The stream of the event at `index`.
    #[inline]
    pub fn stream(&self, index: usize) -> u64 {
        self.stream.get(index)
    }

    /// The action at `index`, decoded.
    pub fn action(&self, index: usize) -> Action {
        self.decode_action(self.action[index])
    }

    pub fn decode_action(&self, code: ActionCode) -> Action {
        match code {
            ActionCode::ALLOC => Action::Alloc,
            ActionCode::FREE_REQUESTED => Action::FreeRequested,
            ActionCode::FREE_COMPLETED => Action::FreeCompleted,
            ActionCode::SEGMENT_ALLOC => Action::SegmentAlloc,
            ActionCode::SEGMENT_FREE => Action::SegmentFree,
            ActionCode::SEGMENT_MAP => Action::SegmentMap,
            ActionCode::SEGMENT_UNMAP => Action::SegmentUnmap,
            ActionCode::SNAPSHOT => Action::Snapshot,
            ActionCode::OOM => Action::Oom,
            ActionCode(code) => Action::Unknown(
                self.unknown_actions
                    .get(usize::from(code - ActionCode::FIRST_UNKNOWN))
                    .cloned()
                    .unwrap_or_default(),
            ),
        }
    }

    /// The name of an action code as torch writes it.
    pub fn action_name(&self, code: ActionCode) -> &str {
        if code.is_known() {
            ActionCode::KNOWN[usize::from(code.0)]
        } else {
            self.unknown_actions
                .get(usize::from(code.0 - ActionCode::FIRST_UNKNOWN))
                .map_or("unknown", String::as_str)
        }
    }

    /// The code for an action name, registering unknown names.
    pub fn code_for(&mut self, name: &str) -> ActionCode {
        if let Some(code) = ActionCode::known(name) {
            return code;
        }
        if let Some(i) = self.unknown_actions.iter().position(|n| n == name) {
            return ActionCode(ActionCode::FIRST_UNKNOWN + i as u8);
        }
        // More than 246 distinct unknown action names is not a snapshot; fold the rest into the last.
        let i = self
            .unknown_actions
            .len()
            .min(usize::from(u8::MAX - ActionCode::FIRST_UNKNOWN));
        if i == self.unknown_actions.len() {
            self.unknown_actions.push(name.to_owned());
        }
        ActionCode(ActionCode::FIRST_UNKNOWN + i as u8)
    }

    /// Index of `text` in [`Trace::strings`], adding it if new.
    pub fn string_id(&mut self, text: &str) -> u32 {
        if self.strings.is_empty() {
            self.strings.push(String::new());
        }
        if text.is_empty() {
            return 0;
        }
        // Few distinct texts exist (compile contexts, metadata tags); a linear scan from the end
        // finds the common repeat at once.
        if let Some(i) = self.strings.iter().rposition(|s| s == text) {
            return i as u32;
        }
        self.strings.push(text.to_owned());
        (self.strings.len() - 1) as u32
    }

    /// The `category` the entry at `event` carries, if any.
    pub fn category_of(&self, event: usize) -> Option<&str> {
        match self.category.get(event).copied().unwrap_or(0) {
            0 => None,
            id => self.categories.get(usize::from(id)).map(String::as_str),
        }
    }

    /// Labels the entry at `event` with `category` (the JSON reader and the pickle compactor),
    /// interning the text: a profiler writes a handful of categories millions of times.
    pub fn set_category(&mut self, event: usize, category: &str) {
        if self.categories.is_empty() {
            self.categories.push(String::new());
        }
        let id = match self.categories.iter().position(|c| c == category) {
            Some(id) => id,
            // More than 255 distinct categories is not a profiler's; the rest read as none.
            None if self.categories.len() > usize::from(u8::MAX) => return,
            None => {
                self.categories.push(category.to_owned());
                self.categories.len() - 1
            }
        };
        if self.category.len() <= event {
            self.category.resize(event + 1, 0);
        }
        self.category[event] = id as u8;
    }

    pub fn string(&self, id: u32) -> Option<&str> {
        match id {
            0 => None,
            id => self.strings.get(id as usize).map(String::as_str),
        }
    }

    /// The whole entry at `index`.
    pub fn entry(&self, index: usize) -> TraceEntry {
        TraceEntry {
            action: self.action(index),
            addr: self.addr.get(index),
            size: self.size.get(index),
            stream: self.stream.get(index),
            time_us: self.time_us.get(index),
            stack: self.stack.get(index),
            compile_context: self
                .string(self.compile_context.get(index))
                .map(str::to_owned),
            user_metadata: self
                .string(self.user_metadata.get(index))
                .map(str::to_owned),
            device_free: self.device_free.get(&index).copied(),
        }
    }

    /// Appends one entry (used by the JSON reader and tests; the pickle path fills columns directly).
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        action: ActionCode,
        addr: u64,
        size: u64,
        stream: u64,
        time_us: Option<i64>,
        stack: StackId,
        compile_context: u32,
        user_metadata: u32,
    ) {
        self.action.push(action);
        self.addr.push(addr);
        self.size.push(size);
        self.stream.push(stream);
        self.has_time |= time_us.is_some();
        self.time_us.push(time_us.unwrap_or(0));
        self.stack.push(stack);
        let event = self.stack.len() - 1;
        self.compile_context.set(event, compile_context);
        self.user_metadata.set(event, user_metadata);
    }
}

impl Trace {
    /// The heap bytes of this trace, for [`Snapshot::heap_bytes`](super::Snapshot::heap_bytes):
    /// every column by what it allocated (nothing when mapped), the side tables by count. Every
    /// field is named, so a new column does not compile until it is counted here.
    pub fn heap_bytes(&self) -> u64 {
        /// Per entry of a `BTreeMap`: key, value and the node's share.
        const PER_MAP_ENTRY: u64 = 48;
        let Trace {
            action,
            addr,
            size,
            stream,
            time_us,
            stack,
            compile_context,
            user_metadata,
            strings,
            device_free,
            unknown_actions,
            category,
            categories,
            has_time: _,
        } = self;
        action.heap_bytes()
            + addr.heap_bytes()
            + size.heap_bytes()
            + stream.heap_bytes()
            + time_us.heap_bytes()
            + stack.heap_bytes()
            + compile_context.heap_bytes()
            + user_metadata.heap_bytes()
            + category.heap_bytes()
            + (strings.len() + unknown_actions.len() + categories.len()) as u64
                * super::PER_TABLE_ENTRY
            + device_free.len() as u64 * PER_MAP_ENTRY
    }
}
