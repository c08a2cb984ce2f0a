//! From decoded pickle values to the [`Snapshot`] model.
//!
//! Two halves share one set of rules. [`TraceCompactor`] runs *while* the pickle is decoded: each
//! trace-entry dict becomes a row of columns and each frame dict an interned [`FrameId`] the
//! moment it is complete, so a 3-million-event file never holds 3 million dicts. [`build`] then
//! walks the (now small) top level and assembles segments, blocks, per-device traces and settings.
//! Both are tolerant: missing keys take defaults, unknown keys and actions are kept or ignored,
//! never fatal.

use super::{
    Annotation, Block, BlockState, Frame, FrameId, FrameTable, Segment, Snapshot, StackId,
    StackTable, Trace,
};
use crate::pickle::{Compactor, Heap, Kind, Memo, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A snapshot's shape was not what any torch version writes.
#[derive(Debug, thiserror::Error)]
#[error("not a memory snapshot: {0}")]
pub struct ShapeError(pub String);

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
enum Record {
    Frame(FrameId),
    Stack(StackId),
    Event(usize),
}

fn record_of(value: Value) -> Option<Record> {
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
#[derive(Debug, Default)]
pub struct TraceCompactor {
    /// Every trace entry of every device, in the order decoded; [`build`] splits them by device.
    events: Trace,
    frames: FrameTable,
    stacks: StackTable,
    /// `Field` by string id; most keys are the same few memoized strings.
    fields: Vec<Field>,
    scratch: Vec<FrameId>,
    frame_of_dict: rustc_hash::FxHashMap<Value, FrameId>,
}

impl TraceCompactor {
    #[inline]
    fn field(&mut self, heap: &Heap, key: Value) -> Field {
        if !key.is(Kind::Str) {
            return Field::Other;
        }
        let id = key.payload() as usize;
        if id >= self.fields.len() {
            self.fields.resize(id + 1, Field::Unresolved);
        }
        if self.fields[id] == Field::Unresolved {
            self.fields[id] = heap.str(key).map_or(Field::Other, field_of_name);
        }
        self.fields[id]
    }

    /// A frame dict as an interned frame, if it has a filename or a name.
    fn frame(&mut self, heap: &Heap, dict: Value) -> Option<FrameId> {
        // A frame dict referenced again inside the list that first holds it (recursion) is still a
        // dict there; this cache makes such repeats cheap.
        if let Some(&frame) = self.frame_of_dict.get(&dict) {
            return Some(frame);
        }
        let mut filename: Option<Arc<str>> = None;
        let mut name: Option<Arc<str>> = None;
        let mut line = 0;
        for &(key, value) in heap.pairs(dict)? {
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
    fn stack(&mut self, heap: &mut Heap, memo: &mut Memo, frames: Value) -> StackId {
        if let Some(Record::Stack(stack)) = record_of(frames) {
            return stack;
        }
        let Some(items) = heap.items(frames) else {
            return StackTable::EMPTY;
        };
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
        for (position, dict) in unresolved {
            match self.frame(heap, dict) {
                Some(frame) => self.scratch[position] = frame,
                None => self.scratch[position] = FrameId::MAX,
            }
        }
        self.scratch.retain(|&f| f != FrameId::MAX);
        let stack = self.stacks.intern(&self.scratch);
        heap.retire(frames, Value::record(STACK_RECORD | u64::from(stack)), memo);
        stack
    }

    /// Appends a trace entry dict as a row of [`TraceCompactor::events`]; `None` if the dict
    /// has no string `action` (so it is not an entry).
    fn event(&mut self, heap: &mut Heap, memo: &mut Memo, dict: Value) -> Option<usize> {
        let mut action = None;
        let (mut addr, mut size, mut stream, mut time_us) = (0, 0, 0, None);
        let (mut frames, mut context, mut metadata, mut device_free) = (None, None, None, None);
        for &(key, value) in heap.pairs(dict)? {
            match self.field(heap, key) {
                Field::Action => action = Some(value),
                Field::Addr => addr = heap.u64(value).unwrap_or(0),
                Field::Size => size = heap.u64(value).unwrap_or(0),
                Field::Stream => stream = heap.u64(value).unwrap_or(0),
                Field::TimeUs => time_us = heap.i64(value),
                Field::Frames => frames = Some(value),
                Field::CompileContext => context = Some(value),
                Field::UserMetadata => metadata = Some(value),
                Field::DeviceFree => device_free = heap.u64(value),
                _ => {}
            }
        }
        let action_name = heap.str(action?)?;
        let code = self.events.code_for(action_name);
        let context = context
            .and_then(|v| heap.str(v))
            .filter(|text| *text != "N/A")
            .map_or(0, |text| self.events.string_id(text));
        let metadata = metadata.map_or(0, |v| match heap.str(v) {
            Some(text) => self.events.string_id(text),
            None => {
                let json = to_json(heap, v, 0).to_string();
                self.events.string_id(&json)
            }
        });
        let stack = match frames {
            Some(frames) => self.stack(heap, memo, frames),
            None => StackTable::EMPTY,
        };
        let row = self.events.len();
        self.events
            .push(code, addr, size, stream, time_us, stack, context, metadata);
        if let Some(free) = device_free {
            self.events.device_free.insert(row, free);
        }
        Some(row)
    }
}

impl Compactor for TraceCompactor {
    fn compact(&mut self, heap: &mut Heap, memo: &mut Memo, dict: Value) -> Option<Value> {
        // Frame dicts have 3 keys, trace entries 5 to 10; look at the first key to tell.
        let &(first_key, _) = heap.pairs(dict)?.first()?;
        match self.field(heap, first_key) {
            Field::Filename | Field::Line | Field::Name if heap.pairs(dict)?.len() <= 4 => {
                let frame = self.frame(heap, dict)?;
                Some(Value::record(FRAME_RECORD | u64::from(frame)))
            }
            Field::Action => {
                let row = self.event(heap, memo, dict)?;
                Some(Value::record(EVENT_RECORD | row as u64))
            }
            _ => None,
        }
    }
}

/// Assembles the model from a decoded top-level value and the compactor that ran during decoding.
pub fn build(
    root: Value,
    mut heap: Heap,
    mut compactor: TraceCompactor,
) -> Result<Snapshot, ShapeError> {
    let mut memo = Memo::default();
    let mut snapshot = Snapshot::default();
    let (segments, traces) = match root.kind() {
        Kind::Dict => {
            let mut segments = None;
            let mut traces = None;
            let pairs = heap.pairs(root).unwrap_or(&[]).to_vec();
            for (key, value) in pairs {
                let Some(name) = heap.str(key) else { continue };
                match name {
                    "segments" => segments = Some(value),
                    "device_traces" => traces = Some(value),
                    "allocator_settings" => snapshot.allocator_settings = to_json(&heap, value, 0),
                    "external_annotations" => {
                        snapshot.external_annotations = annotations(&heap, value);
                    }
                    other => snapshot.unknown_keys.push(other.to_owned()),
                }
            }
            if segments.is_none() && traces.is_none() {
                let keys: Vec<&str> = heap
                    .pairs(root)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(|(k, _)| heap.str(*k))
                    .take(8)
                    .collect();
                return Err(ShapeError(format!(
                    "the top-level dict has neither 'segments' nor 'device_traces' (keys: {})",
                    keys.join(", ")
                )));
            }
            (segments, traces)
        }
        // torch 1.13 wrote the bare list of segments.
        Kind::List => {
            snapshot.source.legacy_segment_list = true;
            (Some(root), None)
        }
        other => {
            return Err(ShapeError(format!(
                "the top level is a {other:?}, not the dict that torch.cuda.memory._snapshot() returns"
            )));
        }
    };
    for value in segments.and_then(|v| heap.items(v)).unwrap_or(&[]).to_vec() {
        if let Some(segment) = segment(&mut heap, &mut memo, &mut compactor, value, &mut snapshot) {
            snapshot.segments.push(segment);
        }
    }

    // Each device's list holds event records in decode order (or dicts the compactor could not
    // take, which are converted now).
    let mut device_rows: Vec<Vec<usize>> = Vec::new();
    let device_lists = traces.and_then(|v| heap.items(v)).unwrap_or(&[]).to_vec();
    for device_list in device_lists {
        let items = heap.items(device_list).unwrap_or(&[]);
        let all_records = items
            .iter()
            .all(|&item| matches!(record_of(item), Some(Record::Event(_))));
        let rows = if all_records {
            items
                .iter()
                .filter_map(|&item| match record_of(item) {
                    Some(Record::Event(row)) => Some(row),
                    _ => None,
                })
                .collect()
        } else {
            let items = items.to_vec();
            let mut rows = Vec::with_capacity(items.len());
            for item in items {
                match record_of(item) {
                    Some(Record::Event(row)) => rows.push(row),
                    _ if item.is(Kind::Dict) => {
                        if let Some(row) = compactor.event(&mut heap, &mut memo, item) {
                            rows.push(row);
                        }
                    }
                    _ => {}
                }
            }
            rows
        };
        device_rows.push(rows);
    }
    // The decoded values are no longer needed; free them before splitting columns.
    drop(heap);
    snapshot.device_traces = split_by_device(std::mem::take(&mut compactor.events), &device_rows);
    snapshot.frames = compactor.frames;
    snapshot.stacks = compactor.stacks;
    Ok(snapshot)
}

fn segment(
    heap: &mut Heap,
    memo: &mut Memo,
    compactor: &mut TraceCompactor,
    dict: Value,
    snapshot: &mut Snapshot,
) -> Option<Segment> {
    heap.pairs(dict)?;
    let get_u64 = |heap: &Heap, key| heap.get(dict, key).and_then(|v| heap.u64(v)).unwrap_or(0);
    let mut segment = Segment {
        device: heap
            .get(dict, "device")
            .and_then(|v| heap.i64(v))
            .unwrap_or(0),
        address: get_u64(heap, "address"),
        total_size: get_u64(heap, "total_size"),
        allocated_size: get_u64(heap, "allocated_size"),
        active_size: get_u64(heap, "active_size"),
        requested_size: get_u64(heap, "requested_size"),
        stream: get_u64(heap, "stream"),
        segment_type: heap
            .get(dict, "segment_type")
            .and_then(|v| heap.str(v))
            .unwrap_or("large")
            .to_owned(),
        pool_id: heap
            .get(dict, "segment_pool_id")
            .and_then(|v| heap.items(v))
            .map_or((0, 0), |items| {
                let at = |i: usize| items.get(i).and_then(|&v| heap.i64(v)).unwrap_or(0);
                (at(0), at(1))
            }),
        is_expandable: heap
            .get(dict, "is_expandable")
            .and_then(|v| heap.bool(v))
            .unwrap_or(false),
        stack: StackTable::EMPTY,
        blocks: Vec::new(),
    };
    if let Some(frames) = heap.get(dict, "frames") {
        segment.stack = compactor.stack(heap, memo, frames);
    }
    let blocks = heap
        .get(dict, "blocks")
        .and_then(|v| heap.items(v))
        .unwrap_or(&[])
        .to_vec();
    // Blocks of old files carry no address: they are contiguous from the segment's start.
    let mut next_address = segment.address;
    for block_dict in blocks {
        let Some(block) = block(heap, memo, compactor, block_dict, next_address, snapshot) else {
            continue;
        };
        next_address = block.address.saturating_add(block.size);
        segment.blocks.push(block);
    }
    Some(segment)
}

fn block(
    heap: &mut Heap,
    memo: &mut Memo,
    compactor: &mut TraceCompactor,
    dict: Value,
    default_address: u64,
    snapshot: &mut Snapshot,
) -> Option<Block> {
    heap.pairs(dict)?;
    let size = heap
        .get(dict, "size")
        .and_then(|v| heap.u64(v))
        .unwrap_or(0);
    let state = heap
        .get(dict, "state")
        .and_then(|v| heap.str(v))
        .map_or(BlockState::Inactive, BlockState::parse);
    let address = heap
        .get(dict, "address")
        .and_then(|v| heap.u64(v))
        .unwrap_or(default_address);
    // torch <= 2.0: `history: [{addr, real_size, frames}]` instead of frames/requested_size;
    // the first history entry is the current allocation (as torch's _memory_viz reads it).
    let (requested_size, frames) = match heap.get(dict, "frames") {
        Some(frames) => (
            heap.get(dict, "requested_size")
                .and_then(|v| heap.u64(v))
                .unwrap_or(size),
            Some(frames),
        ),
        None => match heap
            .get(dict, "history")
            .and_then(|v| heap.items(v))
            .and_then(|h| h.first().copied())
        {
            Some(first) => {
                snapshot.source.legacy_block_history = true;
                (
                    heap.get(first, "real_size")
                        .and_then(|v| heap.u64(v))
                        .unwrap_or(size),
                    heap.get(first, "frames"),
                )
            }
            None => (
                heap.get(dict, "requested_size")
                    .and_then(|v| heap.u64(v))
                    .unwrap_or(size),
                None,
            ),
        },
    };
    let stack = frames.map_or(StackTable::EMPTY, |f| compactor.stack(heap, memo, f));
    Some(Block {
        address,
        size,
        requested_size,
        state,
        stack,
    })
}

fn annotations(heap: &Heap, list: Value) -> Vec<Annotation> {
    let mut out = Vec::new();
    for &item in heap.items(list).unwrap_or(&[]) {
        let Some(pairs) = heap.pairs(item) else {
            continue;
        };
        let mut annotation = Annotation {
            device: 0,
            time_us: 0,
            fields: BTreeMap::new(),
        };
        for &(key, value) in pairs {
            let Some(key) = heap.str(key) else { continue };
            match key {
                "device" => annotation.device = heap.i64(value).unwrap_or(0),
                "time_us" => annotation.time_us = heap.i64(value).unwrap_or(0),
                _ => {
                    let text = match heap.str(value) {
                        Some(text) => text.to_owned(),
                        None => to_json(heap, value, 0).to_string(),
                    };
                    annotation.fields.insert(key.to_owned(), text);
                }
            }
        }
        out.push(annotation);
    }
    out
}

/// Deepest nesting converted to JSON; settings are two levels deep in practice.
const MAX_JSON_DEPTH: usize = 32;

/// A decoded value as JSON (for settings and metadata). Dict keys that are not strings are
/// written in their JSON form; big integers beyond 64 bits become strings.
pub fn to_json(heap: &Heap, value: Value, depth: usize) -> serde_json::Value {
    use serde_json::Value as J;
    if depth > MAX_JSON_DEPTH {
        return J::String("…".into());
    }
    match value.kind() {
        Kind::None | Kind::Record => J::Null,
        Kind::Bool => J::Bool(heap.bool(value).unwrap_or(false)),
        Kind::Int | Kind::BigInt => match (heap.i64(value), heap.u64(value)) {
            (Some(v), _) => J::from(v),
            (None, Some(v)) => J::from(v),
            (None, None) => J::String("<integer beyond 64 bits>".into()),
        },
        Kind::Float => heap
            .f64(value)
            .and_then(serde_json::Number::from_f64)
            .map_or(J::Null, J::Number),
        Kind::Str => J::String(heap.str(value).unwrap_or("").to_owned()),
        Kind::Bytes => J::String(String::from_utf8_lossy(heap.bytes(value).unwrap_or(&[])).into()),
        Kind::List | Kind::Tuple => J::Array(
            heap.items(value)
                .unwrap_or(&[])
                .iter()
                .map(|&v| to_json(heap, v, depth + 1))
                .collect(),
        ),
        Kind::Dict => J::Object(
            heap.pairs(value)
                .unwrap_or(&[])
                .iter()
                .map(|&(k, v)| {
                    let key = match heap.str(k) {
                        Some(text) => text.to_owned(),
                        None => to_json(heap, k, depth + 1).to_string(),
                    };
                    (key, to_json(heap, v, depth + 1))
                })
                .collect(),
        ),
    }
}

/// Splits the decode-order rows into one trace per device. When each device's rows are one
/// ascending run (always, for files torch writes), columns are split in place without copying.
fn split_by_device(mut events: Trace, device_rows: &[Vec<usize>]) -> Vec<Trace> {
    let mut expected = 0;
    let contiguous = device_rows.iter().all(|rows| {
        let ok = rows.iter().enumerate().all(|(i, &row)| row == expected + i);
        expected += rows.len();
        ok
    }) && expected == events.len();
    if contiguous {
        let mut traces: Vec<Trace> = Vec::with_capacity(device_rows.len());
        for rows in device_rows.iter().rev() {
            let start = events.len() - rows.len();
            traces.push(split_off(&mut events, start));
        }
        traces.reverse();
        return traces;
    }
    device_rows
        .iter()
        .map(|rows| gather(&events, rows))
        .collect()
}

fn empty_like(events: &Trace) -> Trace {
    Trace {
        strings: events.strings.clone(),
        unknown_actions: events.unknown_actions.clone(),
        ..Trace::default()
    }
}

fn split_off(events: &mut Trace, start: usize) -> Trace {
    let mut tail = empty_like(events);
    tail.action = events.action.split_off(start);
    tail.addr = events.addr.split_off(start);
    tail.size = events.size.split_off(start);
    tail.stream = events.stream.split_off(start);
    tail.time_us = events.time_us.split_off(start);
    tail.stack = events.stack.split_off(start);
    tail.compile_context = events.compile_context.split_off(start);
    tail.user_metadata = events.user_metadata.split_off(start);
    tail.device_free = events
        .device_free
        .split_off(&start)
        .into_iter()
        .map(|(row, free)| (row - start, free))
        .collect();
    tail.has_time = events.has_time;
    tail
}

fn gather(events: &Trace, rows: &[usize]) -> Trace {
    let mut trace = empty_like(events);
    for &row in rows {
        trace.push(
            events.action[row],
            events.addr[row],
            events.size[row],
            events.stream[row],
            events.has_time.then_some(events.time_us[row]),
            events.stack[row],
            events.compile_context[row],
            events.user_metadata[row],
        );
        if let Some(&free) = events.device_free.get(&row) {
            trace.device_free.insert(trace.len() - 1, free);
        }
    }
    trace
}
