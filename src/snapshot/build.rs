//! From decoded pickle values to the [`Snapshot`] model.
//!
//! [`TraceCompactor`] runs *while* the pickle is decoded and turns
//! trace entries and frames into columns and interned ids; [`build`] then walks the (now small)
//! top level and assembles segments, blocks, per-device traces and settings. Tolerant: missing
//! keys take defaults, unknown keys and actions are kept or ignored, never fatal.

pub(super) use super::compact::TraceCompactor;
use super::compact::{Record, flat_pairs, record_of};
pub(super) use super::convert::ShapeError;
use super::convert::{ConversionBudget, to_json};
use super::follow::{FollowerOutcome, TraceFollower};
use super::load::LoadError;
use super::{Annotation, Block, BlockState, Segment, Snapshot, StackId, StackTable, Trace};
use crate::pickle::{Heap, Kind, Memo, Value};
use std::collections::BTreeMap;

/// Assembles the model from a decoded top-level value and the compactor that ran during
/// decoding, and hands back what the compactor's follower made of the trace (if it ran and saw
/// exactly one device's events).
pub(super) fn build<F: TraceFollower>(
    root: Value,
    mut heap: Heap,
    mut compactor: TraceCompactor<'_, F>,
) -> Result<(Snapshot, Option<FollowerOutcome<F>>), LoadError> {
    let mut memo = Memo::default();
    let mut snapshot = Snapshot::default();
    let mut budget = ConversionBudget::for_heap(&heap);
    // Pinned host memory (`record_pinned_host_memory=True`): its segments and trace, read like a
    // CUDA device's and placed after the CUDA devices (`SourceInfo::host_device`).
    let mut host_segments = None;
    let mut host_traces = None;
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
                    "host_segments" => host_segments = Some(value),
                    "host_traces" => host_traces = Some(value),
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
            // `record_cuda=False` records the host only.
            if segments.is_none()
                && traces.is_none()
                && host_segments.is_none()
                && host_traces.is_none()
            {
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
                return Err(LoadError::Shape(ShapeError(format!(
                    "the top-level dict has neither 'segments' nor 'device_traces' (keys: {})",
                    keys.join(", ")
                ))));
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
            return Err(LoadError::Shape(ShapeError(format!(
                "the top level is a {other:?}, not the dict that torch.cuda.memory._snapshot() returns"
            ))));
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
    // take, which are converted now). `None`: a device with no list (before the host's).
    let mut device_rows: Vec<Rows> = Vec::new();
    let mut device_lists: Vec<Option<Value>> = traces
        .and_then(|v| heap.items(v))
        .unwrap_or(&[])
        .iter()
        .map(|&list| Some(list))
        .collect();
    if host_segments.is_some() || host_traces.is_some() {
        let host = device_lists.len().max(
            snapshot
                .segments
                .iter()
                .map(|s| usize::try_from(s.device).map_or(0, |d| d.saturating_add(1)))
                .max()
                .unwrap_or(0),
        );
        // A device ordinal far past the lists is a hostile file's, not a GPU count: the host
        // stays right after the lists then, and those segments belong to no trace.
        let host = if host > device_lists.len() + 64 {
            device_lists.len()
        } else {
            host
        };
        device_lists.resize(host, None);
        let host_list = host_traces.map(|list| host_trace_list(&heap, parts.compactor, list));
        device_lists.push(host_list);
        for value in host_segments
            .and_then(|v| heap.items(v))
            .unwrap_or(&[])
            .to_vec()
        {
            if let Some(mut segment) = segment(&mut heap, &mut parts, value, &mut snapshot)? {
                segment.device = host as i64;
                snapshot.segments.push(segment);
            }
        }
        snapshot.source.host_device = Some(host);
    }
    // Every device's events, counted before they are copied out: `device_traces` may name one
    // list many times (2 bytes of pickle each), and each time is a whole trace to hold.
    let events: u64 = device_lists
        .iter()
        .flatten()
        .map(|&list| match compactor.event_run(list) {
            Some(run) => run.len() as u64,
            None => heap.items(list).map_or(0, |items| items.len() as u64),
        })
        .sum();
    compactor.count.check(events)?;
    for device_list in device_lists {
        let Some(device_list) = device_list else {
            device_rows.push(Rows::default());
            continue;
        };
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
        return Err(error.into());
    }
    // The decoded values are no longer needed; free them before splitting columns.
    drop(heap);
    let (events, pass) = compactor.finish();
    // The follower assumed all rows are one device's, in decode order.
    let total = events.len();
    let one_device = device_rows
        .iter()
        .position(|rows| rows.len() > 0)
        .filter(|&device| device_rows[device].is_run(0, total));
    let followed = match (one_device, pass) {
        (Some(device), Some(follower)) if follower.events() == total => {
            Some(FollowerOutcome { device, follower })
        }
        _ => None,
    };
    snapshot.device_traces = split_by_device(events, &device_rows);
    snapshot.frames = compactor.frames;
    snapshot.stacks = compactor.stacks;
    Ok((snapshot, followed))
}

/// The host's list of trace entries: `host_traces` itself when it holds entries, or its first
/// list when it is nested like `device_traces` (one list per device; the host is one).
fn host_trace_list<F: TraceFollower>(
    heap: &Heap,
    compactor: &TraceCompactor<'_, F>,
    host_traces: Value,
) -> Value {
    if compactor.event_run(host_traces).is_some() {
        return host_traces;
    }
    match heap.items(host_traces) {
        Some(items) if !items.is_empty() && items.iter().all(|i| i.is(Kind::List)) => items[0],
        _ => host_traces,
    }
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
struct Parts<'a, 'scope, F> {
    memo: &'a mut Memo,
    compactor: &'a mut TraceCompactor<'scope, F>,
    budget: &'a mut ConversionBudget,
    /// Decoding is over, so a list's identity no longer changes meaning: a frames list that
    /// a million blocks share is resolved once, not once per block.
    stacks: rustc_hash::FxHashMap<Value, StackId>,
}

impl<F: TraceFollower> Parts<'_, '_, F> {
    fn stack(&mut self, heap: &mut Heap, frames: Value) -> StackId {
        if let Some(&stack) = self.stacks.get(&frames) {
            return stack;
        }
        let stack = self.compactor.stack(heap, self.memo, frames);
        self.stacks.insert(frames, stack);
        stack
    }
}

fn segment<F: TraceFollower>(
    heap: &mut Heap,
    parts: &mut Parts<'_, '_, F>,
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

fn block<F: TraceFollower>(
    heap: &mut Heap,
    parts: &mut Parts<'_, '_, F>,
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
        categories: events.categories.clone(),
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
        tail.category = std::mem::take(&mut events.category);
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
    tail.category = events.category.split_off(start.min(events.category.len()));
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
            events.addr.get(row),
            events.size.get(row),
            events.stream(row),
            events.has_time.then_some(events.time_us.get(row)),
            events.stack.get(row),
            events.compile_context.get(row),
            events.user_metadata.get(row),
        );
        if let Some(&category) = events.category.get(row).filter(|&&c| c != 0) {
            let last = trace.len() - 1;
            trace.category.resize(last, 0);
            trace.category.push(category);
        }
        if let Some(&free) = events.device_free.get(&row) {
            trace.device_free.insert(trace.len() - 1, free);
        }
    }
    trace
}
