//! From decoded pickle values to the [`Snapshot`] model.
//!
//! [`TraceCompactor`] runs *while* the pickle is decoded and turns
//! trace entries and frames into columns and interned ids; [`build`] then walks the (now small)
//! top level and assembles segments, blocks, per-device traces and settings. Tolerant: missing
//! keys take defaults, unknown keys and actions are kept or ignored, never fatal.

pub use super::compact::TraceCompactor;
use super::compact::{Record, flat_pairs, record_of};
use super::{Annotation, Block, BlockState, Segment, Snapshot, StackTable, Trace};
use crate::pickle::{Heap, Kind, Memo, Value};
use std::collections::BTreeMap;

/// A snapshot's shape was not what any torch version writes.
#[derive(Debug, thiserror::Error)]
#[error("not a memory snapshot: {0}")]
pub struct ShapeError(pub String);

/// Assembles the model from a decoded top-level value and the compactor that ran during decoding.
pub fn build(
    root: Value,
    mut heap: Heap,
    mut compactor: TraceCompactor<'_>,
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
    let mut device_rows: Vec<Rows> = Vec::new();
    let device_lists = traces.and_then(|v| heap.items(v)).unwrap_or(&[]).to_vec();
    for device_list in device_lists {
        // Files torch writes hold one run of consecutive event records per device, which the
        // compactor took as they were appended.
        if let Some(run) = compactor.event_run(device_list) {
            device_rows.push(Rows::Run {
                start: run.start,
                len: run.len(),
            });
            continue;
        }
        let items = heap.items(device_list).unwrap_or(&[]);
        let all_records = items
            .iter()
            .all(|&item| matches!(record_of(item), Some(Record::Event(_))));
        let mut rows = Rows::default();
        if all_records {
            for &item in items {
                if let Some(Record::Event(row)) = record_of(item) {
                    rows.push(row);
                }
            }
        } else {
            // A copy: converting an item needs the heap mutably.
            let items = items.to_vec();
            for item in items {
                match record_of(item) {
                    Some(Record::Event(row)) => rows.push(row),
                    _ if item.is(Kind::Dict) => {
                        let pairs = flat_pairs(&heap, item);
                        if let Some(row) = compactor.event(&mut heap, &mut memo, &pairs) {
                            rows.push(row);
                        }
                    }
                    _ => {}
                }
            }
        }
        device_rows.push(rows);
    }
    // The decoded values are no longer needed; free them before splitting columns.
    drop(heap);
    let (events, pass) = compactor.finish();
    // The event pass assumed all rows are one device's, in decode order.
    let total = events.len();
    let one_device = device_rows
        .iter()
        .position(|rows| rows.len() > 0)
        .filter(|&device| device_rows[device].is_run(0, total));
    if let (Some(device), Some(pass)) = (one_device, pass) {
        snapshot.event_pass = std::sync::Mutex::new(Some((device, total, pass)));
    }
    snapshot.device_traces = split_by_device(events, &device_rows);
    snapshot.frames = compactor.frames;
    snapshot.stacks = compactor.stacks;
    Ok(snapshot)
}

fn segment(
    heap: &mut Heap,
    memo: &mut Memo,
    compactor: &mut TraceCompactor<'_>,
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
    compactor: &mut TraceCompactor<'_>,
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

/// The rows of one device's trace, in decode order.
#[derive(Debug)]
enum Rows {
    /// `start..start + len`: the only layout torch writes, kept without a list of 3 million rows.
    Run {
        start: usize,
        len: usize,
    },
    List(Vec<usize>),
}

impl Default for Rows {
    fn default() -> Self {
        Self::Run { start: 0, len: 0 }
    }
}

impl Rows {
    fn push(&mut self, row: usize) {
        match self {
            Self::Run { start, len } if *len == 0 => (*start, *len) = (row, 1),
            Self::Run { start, len } if *start + *len == row => *len += 1,
            Self::Run { start, len } => {
                let mut list: Vec<usize> = (*start..*start + *len).collect();
                list.push(row);
                *self = Self::List(list);
            }
            Self::List(list) => list.push(row),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Run { len, .. } => *len,
            Self::List(list) => list.len(),
        }
    }

    /// Whether these are exactly rows `start..start + len`.
    fn is_run(&self, start: usize, len: usize) -> bool {
        match self {
            Self::Run { len: 0, .. } => len == 0,
            Self::Run { start: s, len: n } => *s == start && *n == len,
            Self::List(list) => {
                list.len() == len && list.iter().enumerate().all(|(i, &row)| row == start + i)
            }
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = usize> + '_> {
        match self {
            Self::Run { start, len } => Box::new(*start..*start + *len),
            Self::List(list) => Box::new(list.iter().copied()),
        }
    }
}

/// Splits the decode-order rows into one trace per device. When each device's rows are one
/// ascending run (always, for files torch writes), columns are split in place without copying.
fn split_by_device(mut events: Trace, device_rows: &[Rows]) -> Vec<Trace> {
    let mut expected = 0;
    let contiguous = device_rows.iter().all(|rows| {
        let ok = rows.is_run(expected, rows.len());
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

/// Moves rows `start..` of `events` into a trace of their own.
fn split_off(events: &mut Trace, start: usize) -> Trace {
    let mut tail = empty_like(events);
    if start == 0 {
        // Every row moves: take the columns rather than copy them (`Vec::split_off(0)` copies).
        tail.action = std::mem::take(&mut events.action);
        tail.addr = std::mem::take(&mut events.addr);
        tail.size = std::mem::take(&mut events.size);
        tail.stream = std::mem::take(&mut events.stream);
        tail.time_us = std::mem::take(&mut events.time_us);
        tail.stack = std::mem::take(&mut events.stack);
        tail.compile_context = std::mem::take(&mut events.compile_context);
        tail.user_metadata = std::mem::take(&mut events.user_metadata);
        tail.device_free = std::mem::take(&mut events.device_free);
        tail.has_time = events.has_time;
        return tail;
    }
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

fn gather(events: &Trace, rows: &Rows) -> Trace {
    let mut trace = empty_like(events);
    for row in rows.iter() {
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
