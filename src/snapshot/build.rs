//! From decoded pickle values to the [`Snapshot`] model.
//!
//! [`TraceCompactor`] runs *while* the pickle is decoded and turns
//! trace entries and frames into columns and interned ids; [`build`] then walks the (now small)
//! top level and assembles segments, blocks, per-device traces and settings. Tolerant: missing
//! keys take defaults, unknown keys and actions are kept or ignored, never fatal.

pub use super::compact::TraceCompactor;
use super::compact::{Record, flat_pairs, record_of};
use super::{Annotation, Block, BlockState, Segment, Snapshot, StackId, StackTable, Trace};
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
    let mut budget = ConversionBudget::for_heap(&heap);
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
                    "allocator_settings" => {
                        snapshot.allocator_settings =
                            to_json(&heap, value, &mut budget, "allocator_settings")?;
                    }
                    "external_annotations" => {
                        snapshot.external_annotations = annotations(&heap, value, &mut budget)?;
                    }
                    other => snapshot
                        .unknown_keys
                        .push(budget.copy(other, "the top-level keys")?),
                }
            }
            if segments.is_none() && traces.is_none() {
                // A key may be a 64 MiB string: the message names the first characters only.
                let keys: Vec<String> = heap
                    .pairs(root)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(|(k, _)| heap.str(*k))
                    .take(8)
                    .map(|key| match key.char_indices().nth(40) {
                        Some((cut, _)) => format!("{}…", &key[..cut]),
                        None => key.to_owned(),
                    })
                    .collect();
                return Err(ShapeError(format!(
                    "the top-level dict has neither 'segments' nor 'device_traces' (keys: {})",
                    keys.join(", ")
                )));
            }
            (segments, traces)
        }
        // torch 1.13 wrote the bare list of segments (`torch.cuda.memory_snapshot()`), which is
        // `[]` when nothing was allocated: an empty list stays a valid, empty legacy snapshot.
        // Anything else in the list must be a segment, as a top-level dict must have its keys:
        // `[1, 2, 3]` or a list nested a million deep is not "a snapshot with 0 segments".
        Kind::List => {
            check_legacy_segment_list(&heap, root)?;
            snapshot.source.legacy_segment_list = true;
            (Some(root), None)
        }
        other => {
            return Err(ShapeError(format!(
                "the top level is a {other:?}, not the dict that torch.cuda.memory._snapshot() returns"
            )));
        }
    };
    let mut parts = Parts {
        memo: &mut memo,
        compactor: &mut compactor,
        budget: &mut budget,
        stacks: rustc_hash::FxHashMap::default(),
    };
    for value in segments.and_then(|v| heap.items(v)).unwrap_or(&[]).to_vec() {
        if let Some(segment) = segment(&mut heap, &mut parts, value, &mut snapshot)? {
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
    if let Some(error) = compactor.take_failure() {
        return Err(error);
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

/// The top-level list of a torch 1.13 file, if it is one: empty, or segment dicts only.
fn check_legacy_segment_list(heap: &Heap, list: Value) -> Result<(), ShapeError> {
    let items = heap.items(list).unwrap_or(&[]);
    for (index, &item) in items.iter().enumerate() {
        let is_segment = heap.pairs(item).is_some()
            && ["address", "total_size", "blocks"]
                .iter()
                .all(|key| heap.get(item, key).is_some());
        if !is_segment {
            return Err(ShapeError(format!(
                "the top level is a list (torch 1.13's list of segments), but item {index} is a {:?}, not a segment dict with 'address', 'total_size' and 'blocks'",
                item.kind()
            )));
        }
    }
    Ok(())
}

/// What building segments and blocks shares: the memo and compactor (for stacks), the
/// conversion budget, and the stack of each frames list already resolved.
struct Parts<'a, 'scope> {
    memo: &'a mut Memo,
    compactor: &'a mut TraceCompactor<'scope>,
    budget: &'a mut ConversionBudget,
    /// Decoding is over, so a list's identity no longer changes meaning: a frames list that
    /// a million blocks share is resolved once, not once per block.
    stacks: rustc_hash::FxHashMap<Value, StackId>,
}

impl Parts<'_, '_> {
    fn stack(&mut self, heap: &mut Heap, frames: Value) -> StackId {
        if let Some(&stack) = self.stacks.get(&frames) {
            return stack;
        }
        let stack = self.compactor.stack(heap, self.memo, frames);
        self.stacks.insert(frames, stack);
        stack
    }
}

fn segment(
    heap: &mut Heap,
    parts: &mut Parts<'_, '_>,
    dict: Value,
    snapshot: &mut Snapshot,
) -> Result<Option<Segment>, ShapeError> {
    if heap.pairs(dict).is_none() {
        return Ok(None);
    }
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
        segment_type: parts.budget.copy(
            heap.get(dict, "segment_type")
                .and_then(|v| heap.str(v))
                .unwrap_or("large"),
            "segment_type",
        )?,
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
        segment.stack = parts.stack(heap, frames);
    }
    let blocks = heap
        .get(dict, "blocks")
        .and_then(|v| heap.items(v))
        .unwrap_or(&[])
        .to_vec();
    // Blocks of old files carry no address: they are contiguous from the segment's start.
    let mut next_address = segment.address;
    for block_dict in blocks {
        let Some(block) = block(heap, parts, block_dict, next_address, snapshot)? else {
            continue;
        };
        next_address = block.address.saturating_add(block.size);
        segment.blocks.push(block);
    }
    Ok(Some(segment))
}

fn block(
    heap: &mut Heap,
    parts: &mut Parts<'_, '_>,
    dict: Value,
    default_address: u64,
    snapshot: &mut Snapshot,
) -> Result<Option<Block>, ShapeError> {
    if heap.pairs(dict).is_none() {
        return Ok(None);
    }
    let size = heap
        .get(dict, "size")
        .and_then(|v| heap.u64(v))
        .unwrap_or(0);
    let state = match heap.get(dict, "state").and_then(|v| heap.str(v)) {
        None => BlockState::Inactive,
        Some(name) => match BlockState::parse_known(name) {
            Some(state) => state,
            None => BlockState::Unknown(parts.budget.copy(name, "a block's state")?),
        },
    };
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
    let stack = frames.map_or(StackTable::EMPTY, |f| parts.stack(heap, f));
    Ok(Some(Block {
        address,
        size,
        requested_size,
        state,
        stack,
    }))
}

fn annotations(
    heap: &Heap,
    list: Value,
    budget: &mut ConversionBudget,
) -> Result<Vec<Annotation>, ShapeError> {
    const WHAT: &str = "external_annotations";
    let mut out = Vec::new();
    for &item in heap.items(list).unwrap_or(&[]) {
        let Some(pairs) = heap.pairs(item) else {
            continue;
        };
        budget.spend(std::mem::size_of::<Annotation>(), WHAT)?;
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
                        Some(text) => budget.copy(text, WHAT)?,
                        None => {
                            let text = to_json(heap, value, budget, WHAT)?.to_string();
                            budget.spend(text.len(), WHAT)?;
                            text
                        }
                    };
                    annotation.fields.insert(budget.copy(key, WHAT)?, text);
                }
            }
        }
        out.push(annotation);
    }
    Ok(out)
}

/// Deepest nesting converted to JSON; settings are two levels deep in practice. Deeper values
/// (and reference cycles, which the memo can make) end in `"…"`.
const MAX_JSON_DEPTH: usize = 32;

/// What turning file values into owned text and JSON may still cost, in bytes of output.
///
/// The pickle memo lets a file refer to one value many times: a list holding itself twice, 32
/// levels deep, is 300 bytes of pickle and 2^32 values of JSON, and a 64 MiB string referenced
/// by every annotation is 64 MiB per reference. The heap keeps such sharing (each value is
/// decoded once); every conversion that copies values out of it spends from a budget bounded by
/// what was decoded, so a shared-structure bomb is refused after a bounded amount of work.
#[derive(Debug)]
pub struct ConversionBudget {
    remaining: u64,
}

/// Output every file may convert, however small: settings and annotations of a real file are
/// kilobytes (a long trace's annotations a few MB, which the share below covers).
pub(super) const CONVERSION_FLOOR: u64 = 8 << 20;

/// Output allowed per byte of decoded values other than text: annotations copy each interned
/// name once per annotation (a 16-byte dict entry becomes two short strings, about 100 bytes as
/// counted below); much more than that is sharing.
const CONVERSION_PER_DECODED_BYTE: u64 = 16;

/// What each converted value costs beyond its text: a `serde_json::Value` is 32 bytes, a
/// `String` 24 plus its allocation; so the budget is close to the memory the output takes.
const COST_PER_VALUE: u64 = 32;

impl ConversionBudget {
    /// A budget of `bytes` of output.
    pub fn new(bytes: u64) -> Self {
        Self { remaining: bytes }
    }

    /// The budget for converting values of `heap`: the floor, its text once, and a multiple of
    /// its other values (a reference to a text is one of those, so a text shared a million
    /// times costs its length once per reference, which this multiple does not cover).
    pub fn for_heap(heap: &Heap) -> Self {
        let text = heap.text_bytes();
        let values = heap.footprint().saturating_sub(text);
        Self::new(
            CONVERSION_FLOOR
                .saturating_add(text)
                .saturating_add(values.saturating_mul(CONVERSION_PER_DECODED_BYTE)),
        )
    }

    /// Spends `bytes` (plus the per-value cost) converting `what`, or says why not.
    pub fn spend(&mut self, bytes: usize, what: &str) -> Result<(), ShapeError> {
        let cost = (bytes as u64).saturating_add(COST_PER_VALUE);
        match self.remaining.checked_sub(cost) {
            Some(left) => {
                self.remaining = left;
                Ok(())
            }
            None => Err(ShapeError(format!(
                "{what} expands to more data than the whole file holds (a value shared through the pickle memo many times, or a reference cycle); refusing it"
            ))),
        }
    }

    /// An owned copy of `text`, paid for.
    pub fn copy(&mut self, text: &str, what: &str) -> Result<String, ShapeError> {
        self.spend(text.len(), what)?;
        Ok(text.to_owned())
    }
}

/// A decoded value as JSON (for settings and metadata), paid for from `budget`; `what` names
/// the value in the error. Dict keys that are not strings are written in their JSON form; big
/// integers beyond 64 bits become strings.
pub fn to_json(
    heap: &Heap,
    value: Value,
    budget: &mut ConversionBudget,
    what: &str,
) -> Result<serde_json::Value, ShapeError> {
    to_json_at(heap, value, 0, budget, what)
}

fn to_json_at(
    heap: &Heap,
    value: Value,
    depth: usize,
    budget: &mut ConversionBudget,
    what: &str,
) -> Result<serde_json::Value, ShapeError> {
    use serde_json::Value as J;
    if depth > MAX_JSON_DEPTH {
        budget.spend(3, what)?;
        return Ok(J::String("…".into()));
    }
    Ok(match value.kind() {
        Kind::None | Kind::Record => {
            budget.spend(0, what)?;
            J::Null
        }
        Kind::Bool => {
            budget.spend(0, what)?;
            J::Bool(heap.bool(value).unwrap_or(false))
        }
        Kind::Int | Kind::BigInt => {
            budget.spend(0, what)?;
            match (heap.i64(value), heap.u64(value)) {
                (Some(v), _) => J::from(v),
                (None, Some(v)) => J::from(v),
                (None, None) => J::String("<integer beyond 64 bits>".into()),
            }
        }
        Kind::Float => {
            budget.spend(0, what)?;
            heap.f64(value)
                .and_then(serde_json::Number::from_f64)
                .map_or(J::Null, J::Number)
        }
        Kind::Str => J::String(budget.copy(heap.str(value).unwrap_or(""), what)?),
        Kind::Bytes => {
            let bytes = heap.bytes(value).unwrap_or(&[]);
            budget.spend(bytes.len(), what)?;
            J::String(String::from_utf8_lossy(bytes).into())
        }
        Kind::List | Kind::Tuple => {
            budget.spend(0, what)?;
            let items = heap.items(value).unwrap_or(&[]);
            let mut array = Vec::new();
            for &item in items {
                array.push(to_json_at(heap, item, depth + 1, budget, what)?);
            }
            J::Array(array)
        }
        Kind::Dict => {
            budget.spend(0, what)?;
            let mut object = serde_json::Map::new();
            for &(k, v) in heap.pairs(value).unwrap_or(&[]) {
                let key = match heap.str(k) {
                    Some(text) => budget.copy(text, what)?,
                    None => {
                        let key = to_json_at(heap, k, depth + 1, budget, what)?.to_string();
                        // The text form is about as long again as the JSON it came from.
                        budget.spend(key.len(), what)?;
                        key
                    }
                };
                let v = to_json_at(heap, v, depth + 1, budget, what)?;
                object.insert(key, v);
            }
            J::Object(object)
        }
    })
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
