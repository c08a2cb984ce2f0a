//! Trace entries and frames compacted while the pickle is decoded.
//!
//! [`TraceCompactor`] is the pickle machine's [`Compactor`]: each trace-entry dict becomes a row of
//! columns and each frame dict an interned [`FrameId`] the moment it is complete, so a
//! 3-million-event file never holds 3 million dicts. Past 65,536 rows, the columns are filled
//! on a thread of their own and a [`TraceFollower`] runs over the rows on another, while
//! decoding goes on; those threads are in `columns.rs`. The count of events against the load's
//! limit is `count.rs`.
//!
//! One file on purpose beyond that: the rest is the hot loop of a load (every trace entry and
//! frame of the file passes through [`TraceCompactor::event`], `stack` and `frame`, which share
//! the compactor's caches and its record encoding); cut apart, its steps would only be read
//! side by side.

mod columns;
mod count;
pub(crate) mod parallel;

use columns::{
    BATCH, BYTES_PER_ROW_AT_LEAST, Batch, Columns, MAX_EXPECTED_ROWS, PIPELINE_AFTER, Row, Spawn,
    append_batch, spawn_threads,
};

use super::ActionCode;
use super::convert::{CONVERSION_FLOOR, ConversionBudget, ShapeError, to_json};
use super::follow::TraceFollower;
use super::load::{EventGate, LoadError};
use super::{Frame, FrameId, FrameTable, StackId, StackTable, Trace};
use crate::pickle::{Compactor, Heap, Kind, Memo, PickleError, Value};
use count::EventCount;
use std::sync::Arc;

/// Fields of trace entries and frames, resolved once per distinct key string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Unresolved,
    Other,
    Action,
    Addr,
    Size,
    Stream,
    TimeUs,
    Frames,
    CompileContext,
    UserMetadata,
    DeviceFree,
    Category,
    Filename,
    Line,
    Name,
}

fn field_of_name(name: &str) -> Field {
    match name {
        "action" => Field::Action,
        "addr" => Field::Addr,
        "size" => Field::Size,
        "stream" => Field::Stream,
        "time_us" => Field::TimeUs,
        "frames" => Field::Frames,
        "compile_context" => Field::CompileContext,
        "user_metadata" => Field::UserMetadata,
        "device_free" => Field::DeviceFree,
        "category" => Field::Category,
        "filename" => Field::Filename,
        "line" => Field::Line,
        "name" => Field::Name,
        _ => Field::Other,
    }
}

/// Record handles: the top bits say what the rest indexes.
const FRAME_RECORD: u64 = 1 << 58;
const STACK_RECORD: u64 = 1 << 57;
const EVENT_RECORD: u64 = 1 << 56;
const RECORD_INDEX: u64 = EVENT_RECORD - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    Frame(FrameId),
    Stack(StackId),
    Event(usize),
}

pub(super) fn record_of(value: Value) -> Option<Record> {
    if !value.is(Kind::Record) {
        return None;
    }
    let handle = value.payload();
    let index = handle & RECORD_INDEX;
    if handle & FRAME_RECORD != 0 {
        Some(Record::Frame(index as FrameId))
    } else if handle & STACK_RECORD != 0 {
        Some(Record::Stack(index as StackId))
    } else if handle & EVENT_RECORD != 0 {
        Some(Record::Event(index as usize))
    } else {
        None
    }
}

/// Turns trace entries and frames into columns and interned ids as they are decoded.
///
/// Decoding is sequential (the memo makes every opcode depend on the ones before), but filling
/// 3 million rows of columns is not: [`TraceCompactor::pipelined`] hands finished rows in
/// batches to a column thread, which writes (and page-faults in) the columns while this one
/// keeps decoding, and to the follower's thread. The result is the same as
/// [`TraceCompactor::default`], which fills them inline.
#[derive(Debug)]
pub(super) struct TraceCompactor<'scope, F = ()> {
    /// The string tables, unknown actions and `device_free` of every trace entry (the numeric
    /// columns are in `columns` until [`TraceCompactor::finish`]).
    events: Trace,
    /// Rows decoded so far.
    rows: usize,
    /// Rows the columns are sized for up front (0: grown as they come).
    expected_rows: usize,
    batch: Vec<Row>,
    columns: Columns<'scope, F>,
    spawn: Spawn<'scope, F>,
    pub(super) frames: FrameTable,
    pub(super) stacks: StackTable,
    /// `Field` by string id; most keys are the same few memoized strings.
    fields: Vec<Field>,
    /// By string id: the action code of an `action` text, and the [`Trace::strings`] id of a
    /// `compile_context` and of a `user_metadata` text (`UNRESOLVED` until first seen). A long
    /// trace repeats a handful of texts millions of times; this spares comparing them.
    action_codes: Vec<u16>,
    context_ids: Vec<u32>,
    metadata_ids: Vec<u32>,
    scratch: Vec<FrameId>,
    frame_of_dict: rustc_hash::FxHashMap<Value, FrameId>,
    layout: Layout,
    recent_stacks: RecentStacks,
    /// Lists whose appended items were taken as a run of consecutive event rows, by list: a
    /// device's trace list is read back as `start..start + len` without storing its millions
    /// of handles.
    event_runs: rustc_hash::FxHashMap<Value, std::ops::Range<usize>>,
    /// [`Trace::strings`] ids by text: a trace may hold millions of distinct texts, and a scan
    /// of those so far per new one was quadratic (a 17 MB file took 5 minutes).
    text_ids: rustc_hash::FxHashMap<Box<str>, u32>,
    /// What converting values that are not strings into text may still cost.
    conversion: ConversionBudget,
    /// The first conversion refused (the compactor cannot fail an entry; the builder reports it).
    failure: Option<ShapeError>,
    /// The trace events found so far, against the load's limit and gate.
    pub(super) count: EventCount<'scope>,
}

/// The last few frames lists (as their items) and their stacks. Fresh lists of a long trace
/// repeat a handful of stacks; comparing the items with these spares resolving each frame and
/// hashing the stack.
#[derive(Debug, Default)]
struct RecentStacks {
    lists: [(Vec<Value>, StackId); 4],
    next: usize,
}

impl RecentStacks {
    fn find(&self, items: &[Value]) -> Option<StackId> {
        self.lists
            .iter()
            .find(|(list, _)| list.as_slice() == items)
            .map(|&(_, stack)| stack)
    }

    fn insert(&mut self, items: &[Value], stack: StackId) {
        let (list, id) = &mut self.lists[self.next];
        list.clear();
        list.extend_from_slice(items);
        *id = stack;
        self.next = (self.next + 1) % self.lists.len();
    }
}

/// Where each field of a trace entry sits among its items, for one sequence of keys. The entries
/// of a trace repeat the same memoized key strings in the same order, so comparing the keys with
/// the last entry's replaces looking each one up.
#[derive(Debug, Default)]
struct Layout {
    keys: Vec<Value>,
    /// Index in `items` of each field's value (`usize::MAX`: absent), by the slots below.
    at: [usize; ENTRY_FIELDS],
}

const ACTION: usize = 0;
const ADDR: usize = 1;
const SIZE: usize = 2;
const STREAM: usize = 3;
const TIME_US: usize = 4;
const FRAMES: usize = 5;
const CONTEXT: usize = 6;
const METADATA: usize = 7;
const DEVICE_FREE: usize = 8;
const CATEGORY: usize = 9;
const ENTRY_FIELDS: usize = 10;

const UNRESOLVED: u32 = u32::MAX;
const UNRESOLVED_ACTION: u16 = u16::MAX;

impl<F> Default for TraceCompactor<'_, F> {
    fn default() -> Self {
        Self {
            events: Trace::default(),
            rows: 0,
            expected_rows: 0,
            batch: Vec::new(),
            columns: Columns::Inline(Trace::default()),
            spawn: Spawn(None),
            frames: FrameTable::default(),
            stacks: StackTable::default(),
            fields: Vec::new(),
            action_codes: Vec::new(),
            context_ids: Vec::new(),
            metadata_ids: Vec::new(),
            scratch: Vec::new(),
            frame_of_dict: rustc_hash::FxHashMap::default(),
            layout: Layout::default(),
            recent_stacks: RecentStacks::default(),
            event_runs: rustc_hash::FxHashMap::default(),
            text_ids: rustc_hash::FxHashMap::default(),
            conversion: ConversionBudget::new(CONVERSION_FLOOR),
            failure: None,
            count: EventCount::default(),
        }
    }
}

/// A cached id by string id, computing it on first use.
#[inline]
fn cached<T: Copy + PartialEq>(
    cache: &mut Vec<T>,
    unresolved: T,
    id: usize,
    compute: impl FnOnce() -> T,
) -> T {
    if let Some(&known) = cache.get(id)
        && known != unresolved
    {
        return known;
    }
    if id >= cache.len() {
        cache.resize(id + 1, unresolved);
    }
    let value = compute();
    cache[id] = value;
    value
}

/// The [`Trace::strings`] id of `text` in `events`, adding it if new (0 for no text), found
/// through `index`, which holds every text added this way.
fn text_id(
    events: &mut Trace,
    index: &mut rustc_hash::FxHashMap<Box<str>, u32>,
    text: &str,
) -> u32 {
    if text.is_empty() {
        return 0;
    }
    if events.strings.is_empty() {
        // Id 0 is "no text", as `Trace::string_id` keeps it.
        events.strings.push(String::new());
        index.clear();
    }
    if let Some(&id) = index.get(text) {
        return id;
    }
    let id = events.strings.len() as u32;
    events.strings.push(text.to_owned());
    index.insert(text.into(), id);
    id
}

/// An integer the way `Heap::u64` reads it, with the inline case (nearly all) first.
#[inline]
fn u64_of(heap: &Heap, value: Value) -> Option<u64> {
    match heap.small_int(value) {
        Some(v) => u64::try_from(v).ok(),
        None => heap.u64(value),
    }
}

impl<'scope, F: TraceFollower> TraceCompactor<'scope, F> {
    /// A compactor whose columns are filled by a thread of `scope` once the trace is long enough
    /// to be worth it (short traces stay on this thread, as with [`TraceCompactor::default`]).
    pub(super) fn pipelined<'env>(scope: &'scope std::thread::Scope<'scope, 'env>) -> Self {
        Self {
            spawn: Spawn(Some(Box::new(move |trace, expected_rows| {
                spawn_threads(scope, trace, expected_rows)
            }))),
            ..Self::default()
        }
    }

    /// Sizes the columns for a pickle of `bytes` bytes (when known): at most one row per
    /// 64 bytes (the fewest a trace entry takes), so they are reserved once, not grown.
    pub(super) fn expecting_bytes(mut self, bytes: Option<u64>) -> Self {
        self.expected_rows = bytes.map_or(0, |bytes| {
            usize::try_from(bytes / BYTES_PER_ROW_AT_LEAST)
                .unwrap_or(usize::MAX)
                .min(MAX_EXPECTED_ROWS)
        });
        self
    }

    /// Counts the events found against `max_events` and tells `gate` of them as they grow.
    pub(super) fn counting_events(
        mut self,
        max_events: u64,
        gate: Option<&'scope dyn EventGate>,
    ) -> Self {
        self.count = EventCount::new(max_events, gate);
        self
    }

    /// Why the compactor stopped decoding, if it did.
    pub(super) fn take_stop(&mut self) -> Option<LoadError> {
        self.count.take_stop()
    }

    /// Sends the rows gathered so far to the columns.
    fn flush(&mut self) {
        if !self.batch.is_empty() {
            let rows = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
            self.send(Batch {
                rows,
                ids: None,
                _region: None,
            });
        }
    }

    /// Sends `batch` to the columns, after every row gathered before it.
    fn send(&mut self, batch: Batch) {
        if let Columns::Inline(trace) = &mut self.columns
            && trace.len() >= PIPELINE_AFTER
            && let Some(spawn) = self.spawn.0.take()
        {
            self.columns = spawn(std::mem::take(trace), self.expected_rows);
        }
        match &mut self.columns {
            Columns::Inline(trace) => append_batch(trace, &batch),
            Columns::Threads(threads) => threads.send(batch),
        }
    }

    /// All rows decoded so far, as one trace (joins the column threads), and the follower
    /// after all of them if a thread ran it.
    pub(super) fn finish(&mut self) -> (Trace, Option<F>) {
        self.flush();
        let columns = std::mem::replace(&mut self.columns, Columns::Inline(Trace::default()));
        let (mut trace, pass) = match columns {
            Columns::Inline(trace) => (trace, None),
            Columns::Threads(threads) => threads.join(),
        };
        let meta = std::mem::take(&mut self.events);
        trace.strings = meta.strings;
        trace.unknown_actions = meta.unknown_actions;
        trace.device_free = meta.device_free;
        trace.category = meta.category;
        trace.categories = meta.categories;
        self.rows = 0;
        (trace, pass)
    }

    #[inline]
    fn field(&mut self, heap: &Heap, key: Value) -> Field {
        if !key.is(Kind::Str) {
            return Field::Other;
        }
        let id = key.payload() as usize;
        if let Some(&field) = self.fields.get(id)
            && field != Field::Unresolved
        {
            return field;
        }
        if id >= self.fields.len() {
            self.fields.resize(id + 1, Field::Unresolved);
        }
        self.fields[id] = heap.str(key).map_or(Field::Other, field_of_name);
        self.fields[id]
    }

    /// A frame dict (keys and values alternately in `items`) as an interned frame, if it has a
    /// filename or a name.
    fn frame(&mut self, heap: &Heap, dict: Value, items: &[Value]) -> Option<FrameId> {
        // A frame dict referenced again inside the list that first holds it (recursion) is still a
        // dict there; this cache makes such repeats cheap.
        if let Some(&frame) = self.frame_of_dict.get(&dict) {
            return Some(frame);
        }
        let mut filename: Option<Arc<str>> = None;
        let mut name: Option<Arc<str>> = None;
        let mut line = 0;
        for pair in items.chunks_exact(2) {
            let (key, value) = (pair[0], pair[1]);
            match self.field(heap, key) {
                Field::Filename => filename = heap.arc_str(value),
                Field::Name => name = heap.arc_str(value),
                Field::Line => line = heap.u64(value).unwrap_or(0),
                _ => {}
            }
        }
        if filename.is_none() && name.is_none() {
            return None;
        }
        let empty: Arc<str> = Arc::from("");
        let frame = self.frames.intern(Frame {
            filename: filename.unwrap_or_else(|| empty.clone()),
            line,
            name: name.unwrap_or(empty),
        });
        // Only a dict that stays allocated may be cached: an unshared one is freed once compacted
        // and its slot reused by another dict.
        if !heap.can_retire(dict) {
            self.frame_of_dict.insert(dict, frame);
        }
        Some(frame)
    }

    /// The stack of a `frames` value: a list of frame dicts, or a list this compactor already
    /// interned. Retires the list when nothing else refers to it.
    pub(super) fn stack(&mut self, heap: &mut Heap, memo: &mut Memo, frames: Value) -> StackId {
        if let Some(Record::Stack(stack)) = record_of(frames) {
            return stack;
        }
        let Some(items) = heap.items(frames) else {
            return StackTable::EMPTY;
        };
        let stack = if items.is_empty() {
            // Most entries of a long trace carry a fresh empty list.
            StackTable::EMPTY
        } else if let Some(stack) = self.recent_stacks.find(items) {
            stack
        } else {
            self.scratch.clear();
            let mut unresolved = Vec::new();
            for &item in items {
                match record_of(item) {
                    Some(Record::Frame(frame)) => self.scratch.push(frame),
                    _ if item.is(Kind::Dict) => {
                        self.scratch.push(FrameId::MAX);
                        unresolved.push((self.scratch.len() - 1, item));
                    }
                    _ => {}
                }
            }
            // Frame records are final, so a list of them always means the same stack; a dict's
            // slot may be reused for another frame, so a list with dicts is not remembered.
            let has_dicts = !unresolved.is_empty();
            for (position, dict) in unresolved {
                let items = flat_pairs(heap, dict);
                match self.frame(heap, dict, &items) {
                    Some(frame) => self.scratch[position] = frame,
                    None => self.scratch[position] = FrameId::MAX,
                }
            }
            self.scratch.retain(|&f| f != FrameId::MAX);
            let stack = self.stacks.intern(&self.scratch);
            if !has_dicts {
                self.recent_stacks.insert(items, stack);
            }
            stack
        };
        heap.retire(frames, Value::record(STACK_RECORD | u64::from(stack)), memo);
        stack
    }

    /// Appends a trace entry (keys and values alternately in `items`) as a row; `None` if it has
    /// no string `action` (so it is not an entry).
    pub(super) fn event(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        items: &[Value],
    ) -> Option<usize> {
        let same_keys = self.layout.keys.len() * 2 == items.len()
            && items
                .chunks_exact(2)
                .zip(&self.layout.keys)
                .all(|(pair, key)| pair[0] == *key);
        if !same_keys {
            self.layout.keys.clear();
            self.layout.at = [usize::MAX; ENTRY_FIELDS];
            for (i, pair) in items.chunks_exact(2).enumerate() {
                self.layout.keys.push(pair[0]);
                let slot = match self.field(heap, pair[0]) {
                    Field::Action => ACTION,
                    Field::Addr => ADDR,
                    Field::Size => SIZE,
                    Field::Stream => STREAM,
                    Field::TimeUs => TIME_US,
                    Field::Frames => FRAMES,
                    Field::CompileContext => CONTEXT,
                    Field::UserMetadata => METADATA,
                    Field::DeviceFree => DEVICE_FREE,
                    Field::Category => CATEGORY,
                    _ => continue,
                };
                // A key set twice keeps its last value, as Python's dict does.
                self.layout.at[slot] = 2 * i + 1;
            }
        }
        let at = self.layout.at;
        let value = |slot: usize| items.get(at[slot]).copied();
        let int = |slot: usize| value(slot).map_or(0, |v| u64_of(heap, v).unwrap_or(0));
        let (addr, size, stream) = (int(ADDR), int(SIZE), int(STREAM));
        let time_us = value(TIME_US).and_then(|v| heap.small_int(v).or_else(|| heap.i64(v)));
        let device_free = value(DEVICE_FREE).and_then(|v| heap.u64(v));
        let (action, frames) = (value(ACTION), value(FRAMES));
        let (context, metadata) = (value(CONTEXT), value(METADATA));
        let action = action.filter(|v| v.is(Kind::Str))?;
        let events = &mut self.events;
        let code = cached(
            &mut self.action_codes,
            UNRESOLVED_ACTION,
            action.index(),
            || {
                heap.str(action)
                    .map_or(0, |name| u16::from(events.code_for(name).0))
            },
        );
        let code = ActionCode(code as u8);
        let texts = &mut self.text_ids;
        let context = match context {
            Some(v) if v.is(Kind::Str) => {
                cached(&mut self.context_ids, UNRESOLVED, v.index(), || {
                    heap.str(v)
                        .filter(|text| *text != "N/A")
                        .map_or(0, |text| text_id(events, texts, text))
                })
            }
            _ => 0,
        };
        let metadata = match metadata {
            None => 0,
            Some(v) if v.is(Kind::Str) => {
                cached(&mut self.metadata_ids, UNRESOLVED, v.index(), || {
                    heap.str(v).map_or(0, |text| text_id(events, texts, text))
                })
            }
            Some(v) => {
                // torch writes a string; anything else is kept as its JSON text, paid for from
                // a budget (a shared value could otherwise expand without bound, once per entry).
                match to_json(
                    heap,
                    v,
                    &mut self.conversion,
                    "a trace entry's user_metadata",
                ) {
                    Ok(json) => {
                        let json = json.to_string();
                        match self
                            .conversion
                            .spend(json.len(), "a trace entry's user_metadata")
                        {
                            Ok(()) => text_id(events, texts, &json),
                            Err(error) => {
                                self.failure.get_or_insert(error);
                                0
                            }
                        }
                    }
                    Err(error) => {
                        self.failure.get_or_insert(error);
                        0
                    }
                }
            }
        };
        let stack = match frames {
            Some(frames) => self.stack(heap, memo, frames),
            None => StackTable::EMPTY,
        };
        let row = self.rows;
        self.rows += 1;
        self.count.rows += 1;
        self.batch.push(Row {
            addr,
            size,
            stream,
            time_us: time_us.unwrap_or(0),
            stack,
            context,
            metadata,
            action: code,
            has_time: time_us.is_some(),
        });
        if self.batch.len() >= BATCH {
            self.flush();
        }
        if let Some(free) = device_free {
            self.events.device_free.insert(row, free);
        }
        // Only the profiler's snapshots carry a category; the column stays empty otherwise.
        if let Some(category) = value(CATEGORY).and_then(|v| heap.str(v)) {
            self.events.set_category(row, category);
        }
        Some(row)
    }
}

/// A dict's keys and values alternately, as the compactor reads them.
pub(super) fn flat_pairs(heap: &Heap, dict: Value) -> Vec<Value> {
    heap.pairs(dict)
        .unwrap_or(&[])
        .iter()
        .flat_map(|&(k, v)| [k, v])
        .collect()
}

impl<F> TraceCompactor<'_, F> {
    /// Counts the event records among `items`, which a list stores as they are (the same entry
    /// appended again and again, a run restored).
    #[inline]
    fn count_stored_references(&mut self, items: &[Value]) -> Result<(), PickleError> {
        // A frames list (the usual list appended to) holds frame records: no branch per item,
        // so the count vectorizes.
        let events = items
            .iter()
            .map(|&item| u64::from(matches!(record_of(item), Some(Record::Event(_)))))
            .sum::<u64>();
        if events == 0 {
            return Ok(());
        }
        self.count.references += events;
        self.count.counted()
    }

    /// The first conversion the compactor had to refuse, if any.
    pub(super) fn take_failure(&mut self) -> Option<ShapeError> {
        self.failure.take()
    }

    /// The rows of a list whose items this compactor took (see [`Compactor::append`]), if it
    /// took any.
    pub(super) fn event_run(&self, list: Value) -> Option<std::ops::Range<usize>> {
        self.event_runs.get(&list).cloned()
    }

    /// Puts the rows taken from `list` back into it as event handles, so it can store what
    /// follows them.
    fn restore_event_run(&mut self, heap: &mut Heap, list: Value) {
        if let Some(rows) = self.event_runs.remove(&list) {
            for row in rows {
                heap.list_push(list, Value::record(EVENT_RECORD | row as u64));
            }
        }
    }
}

impl<F: TraceFollower> TraceCompactor<'_, F> {
    /// A trace entry's dict (its first key `action`) as its row's record, counted against the
    /// load's limit; `None` if it is not an entry after all (see [`TraceCompactor::event`]).
    fn entry(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        items: &[Value],
    ) -> Result<Option<Value>, PickleError> {
        let row = self.event(heap, memo, items);
        self.count.counted()?;
        Ok(row.map(|row| Value::record(EVENT_RECORD | row as u64)))
    }
}

impl<F: TraceFollower> Compactor for TraceCompactor<'_, F> {
    fn compact(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        dict: Value,
        items: &[Value],
    ) -> Result<Option<Value>, PickleError> {
        // Frame dicts have 3 keys, trace entries 5 to 10; look at the first key to tell.
        let Some(&first_key) = items.first() else {
            return Ok(None);
        };
        Ok(match self.field(heap, first_key) {
            Field::Filename | Field::Line | Field::Name if items.len() <= 8 => self
                .frame(heap, dict, items)
                .map(|frame| Value::record(FRAME_RECORD | u64::from(frame))),
            Field::Action => self.entry(heap, memo, items)?,
            _ => None,
        })
    }

    /// Trace entries only, the dicts that are never stored: a frame dict is kept by its dict
    /// when shared (see `frame`), and is rarely flat (its strings are new).
    fn compact_flat(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        items: &[Value],
    ) -> Result<Option<Value>, PickleError> {
        match items.first() {
            Some(&key) if self.field(heap, key) == Field::Action => self.entry(heap, memo, items),
            _ => Ok(None),
        }
    }

    /// Takes event records appended in row order to a list that holds nothing else (a
    /// device's trace); counts every event record appended to any list.
    fn append(
        &mut self,
        heap: &mut Heap,
        list: Value,
        items: &[Value],
    ) -> Result<bool, PickleError> {
        let Some(Record::Event(first)) = items.first().copied().and_then(record_of) else {
            self.restore_event_run(heap, list);
            self.count_stored_references(items)?;
            return Ok(false);
        };
        let follows = match self.event_runs.get(&list) {
            Some(rows) => rows.end == first,
            None => heap.items(list).is_some_and(<[Value]>::is_empty),
        };
        if !follows || !Value::is_record_run(items, EVENT_RECORD | first as u64) {
            self.restore_event_run(heap, list);
            self.count_stored_references(items)?;
            return Ok(false);
        }
        let rows = self.event_runs.entry(list).or_insert_with(|| {
            // Never retired (so its slot is never reused for another list) even if some hostile
            // file also uses it as an entry's frames.
            heap.note_shared(list);
            first..first
        });
        rows.end = first + items.len();
        self.count.references += items.len() as u64;
        self.count.counted()?;
        Ok(true)
    }
}
