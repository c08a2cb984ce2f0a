//! A trace decoded on every core: regions of an in-memory, framed pickle are decoded by worker
//! threads and spliced into the one sequential decode (see [`Compactor::splice`]).
//!
//! Why this is exact. A pickle is one stack program and its memo makes every opcode depend on
//! those before, but a trace entry is a self-contained expression (`}` MEMOIZE `(` keys and
//! values `u`): what it builds does not depend on the stack below it, only on the memo entries it
//! fetches. So a worker starts at the first entry after a frame boundary (frames always end
//! between opcodes) and decodes entries and the top-level MARK / APPENDS / APPEND opcodes between
//! them. The memo index of each of its puts is known from a count of the puts before (each
//! worker counts its chunk's before decoding it, see `MemoBases`); a fetch from an earlier
//! region stays symbolic (a memo index) until the splice, where the main thread resolves it in
//! its own, exact, memo. The splice then interns the region's frames, stacks, texts and actions
//! in the order the region met them (which is the order a sequential decode would have), hands
//! its rows to the column threads, sets its memo entries, and hands the top-level opcodes back
//! to the machine to do as it would have done them.
//!
//! Anything a worker does not model exactly (a tuple, a nested entry, a category, a frame dict
//! shaped unlike torch's, a fetch of something unfinished) ends its region before that entry,
//! and the main thread decodes from there on its own until the next region: unusual files are
//! slower, never different. Equality with the sequential decoder is tested on every fixture,
//! the hostile files and fuzzed inputs with chunks of a few opcodes (`tests/parallel.rs`).

use super::columns::{BYTES_PER_ROW_AT_LEAST, Batch, Row};
use super::{
    EVENT_RECORD, FRAME_RECORD, Field, RecentStacks, STACK_RECORD, TraceCompactor, field_of_name,
    text_id,
};
use crate::pickle::scan::FrameStarts;
use crate::pickle::scan::{FRAME, MEMOIZE, count_memo_puts, frame_starts};
use crate::pickle::{
    CountedBlock, Heap, Kind, Landed, Landing, Limits, MachineState, Memo, PickleError, Splice,
    SpliceOp, Value,
};
use crate::snapshot::follow::TraceFollower;
use crate::snapshot::{ActionCode, FrameId, StackId, StackTable};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex};

/// Regions spliced in by every parallel decode of this process, so tests can tell that the
/// parallel path ran rather than fell back.
static SPLICED: AtomicU64 = AtomicU64::new(0);

/// Regions of trace spliced in so far by parallel decodes in this process.
pub fn parallel_splices() -> u64 {
    SPLICED.load(Ordering::Relaxed)
}

/// How to decode one pickle in parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parallel {
    /// Threads that decode regions (besides the main one, which splices them in).
    pub threads: usize,
    /// Bytes per region at least (regions start at frame boundaries). Tests force this down
    /// to one frame so that every boundary case is met.
    pub chunk_bytes: usize,
}

impl Parallel {
    /// Regions of about 1 MiB: a few hundred per large file, so every core gets work and the
    /// per-region cost (finding the first entry, merging tables) stays far below decoding.
    /// The regions decoded ahead of the splice are most of a parallel read's peak: on 16 cores
    /// 2 MiB cost the 287 MB file 240-253 MB at its peak against 182-192 MB, and was no faster
    /// (the ten-times file: 2.32-2.40 s against 2.15-2.32 s); 512 KiB saved 25 MB more but
    /// slowed the ten-times file.
    pub const CHUNK_BYTES: usize = 1 << 20;

    pub fn with_threads(threads: usize) -> Self {
        Self {
            threads,
            chunk_bytes: Self::CHUNK_BYTES,
        }
    }
}

/// One stretch of the pickle between frame boundaries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunk {
    start: usize,
    end: usize,
}

/// Where the chunks of a framed (protocol 4-5) pickle start: found from its frame headers as
/// the decode asks for them, so a pickle still landing is cut as its bytes arrive. Chunk `i`
/// runs from bound `i` to bound `i + 1`, the last one to the end of the input; bounds are
/// frame starts at least `chunk_bytes` apart (the first few less: see
/// [`ChunkPlan::least_bytes`]). Only frame headers are read: each chunk's memo puts are
/// counted by the worker that decodes it, right before (see [`MemoBases`]).
pub(crate) struct ChunkPlan<'a> {
    bytes: Landed<'a>,
    chunk_bytes: usize,
    /// The bounds found so far. Apart from the walk, so that asking a bound already found
    /// never waits for one still landing.
    bounds: Mutex<Bounds>,
    walk: Mutex<FrameStarts<'a>>,
}

#[derive(Debug, Default)]
struct Bounds {
    found: Vec<usize>,
    /// The last bound found is the end of the input: no chunk starts there.
    ended: bool,
}

impl<'a> ChunkPlan<'a> {
    /// The plan of `bytes`, `None` unless it is a protocol 4-5 pickle. With `file` (the file
    /// `bytes` maps), frame headers are read from the file: through the map, each read would
    /// fault in the pages around it (a second on the 2.5 GB file, on one thread, and the
    /// whole file resident).
    pub(crate) fn new(
        bytes: Landed<'a>,
        file: Option<&'a std::fs::File>,
        chunk_bytes: usize,
    ) -> Option<Self> {
        let head = bytes.upto(2);
        if head.len() < 2 || head[0] != 0x80 || head[1] < 4 {
            return None;
        }
        Some(Self {
            bytes,
            chunk_bytes: chunk_bytes.max(1),
            bounds: Mutex::new(Bounds::default()),
            walk: Mutex::new(frame_starts(bytes, file)),
        })
    }

    /// Bound `index`, walking (and waiting for) the frame headers up to it; `None` past the
    /// last one.
    fn bound(&self, index: usize) -> Option<usize> {
        if let Some(found) = self.found(index) {
            return found;
        }
        let mut walk = self.walk.lock().ok()?;
        loop {
            if let Some(found) = self.found(index) {
                return found;
            }
            let next = walk.next();
            let mut bounds = self.bounds.lock().ok()?;
            let last = bounds.found.last().copied();
            let least = self.least_bytes(bounds.found.len().saturating_sub(1));
            match next {
                Some(start) if last.is_none_or(|last| start - last >= least) => {
                    bounds.found.push(start);
                }
                Some(_) => {}
                None => {
                    // Drop the lock on the bounds while the rest lands: others read them.
                    drop(bounds);
                    let end = self.bytes.all().len();
                    let mut bounds = self.bounds.lock().ok()?;
                    if bounds.found.last().is_some_and(|&last| last < end) {
                        bounds.found.push(end);
                    }
                    bounds.ended = true;
                }
            }
        }
    }

    /// The least bytes of chunk `index`. The first chunks are smaller (a sixteenth of the
    /// rest, doubling): the main thread decodes the top of the file alone until it has met the
    /// first trace entry, and every core waits on it meanwhile (8 ms of the 287 MB file's
    /// 200 ms decode on 16 cores with a first chunk of 1 MiB).
    fn least_bytes(&self, index: usize) -> usize {
        ((self.chunk_bytes >> 4).max(1) << index.min(4)).min(self.chunk_bytes)
    }

    /// Bound `index` if the walk has settled it (`Some(None)`: there is none).
    fn found(&self, index: usize) -> Option<Option<usize>> {
        let bounds = self.bounds.lock().ok()?;
        match bounds.found.get(index) {
            Some(&bound) => Some(Some(bound)),
            None if bounds.ended => Some(None),
            None => None,
        }
    }

    /// Where chunk `index` starts, if there is such a chunk (its end may still be landing).
    pub(crate) fn start(&self, index: usize) -> Option<usize> {
        let start = self.bound(index)?;
        let bounds = self.bounds.lock().ok()?;
        let is_the_end = bounds.ended && bounds.found.len() == index + 1;
        (!is_the_end).then_some(start)
    }

    /// Chunk `index`, once its end is known.
    fn chunk(&self, index: usize) -> Option<Chunk> {
        Some(Chunk {
            start: self.bound(index)?,
            end: self.bound(index.checked_add(1)?)?,
        })
    }

    /// Chunks found so far.
    pub(crate) fn planned(&self) -> usize {
        self.bounds
            .lock()
            .map_or(0, |bounds| bounds.found.len().saturating_sub(1))
    }
}

/// The memo index of each chunk's first put, known once the puts of every chunk before it are
/// counted. Each worker counts the chunk it takes before decoding it (the pages it then
/// decodes are in cache) and the bases follow as a running sum; a worker waits only for the
/// counts of the chunks before its own, which the workers ahead of it are counting at once.
#[derive(Debug)]
struct MemoBases {
    state: Mutex<BaseState>,
    counted: Condvar,
}

#[derive(Debug)]
struct BaseState {
    /// By chunk: its puts, once counted (`Some(None)`: it cannot be counted, an opcode cut by
    /// its end or one only the sequential decoder reads). Grows as chunks are counted.
    counts: Vec<Option<Option<u32>>>,
    /// By chunk: its base, once every count before it is known (up to `frontier`).
    bases: Vec<Option<u32>>,
    /// The first chunk whose count is not yet added to a base.
    frontier: usize,
    /// The sum cannot go past `frontier` (a chunk there cannot be counted, or the sum would
    /// overflow): no chunk after it gets a base, and the main thread decodes them.
    broken: bool,
}

impl MemoBases {
    /// Bases from chunk `first` on, whose base is `base`.
    fn new(first: usize, base: u32) -> Self {
        let mut bases = vec![None; first];
        bases.push(Some(base));
        Self {
            state: Mutex::new(BaseState {
                counts: vec![None; first + 1],
                bases,
                frontier: first,
                broken: false,
            }),
            counted: Condvar::new(),
        }
    }

    /// Records the count of chunk `index` and extends the bases as far as the counts go.
    fn count(&self, index: usize, count: Option<u32>) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if state.counts.len() <= index {
            state.counts.resize(index + 1, None);
        }
        state.counts[index] = Some(count);
        while !state.broken {
            let at = state.frontier;
            let (Some(&Some(base)), Some(&Some(count))) =
                (state.bases.get(at), state.counts.get(at))
            else {
                break;
            };
            match count.and_then(|count| base.checked_add(count)) {
                Some(next) => {
                    state.bases.push(Some(next));
                    state.frontier = at + 1;
                }
                None => state.broken = true,
            }
        }
        drop(state);
        self.counted.notify_all();
    }

    /// Wakes every worker waiting for a base, to see the decode cancelled. (Under the lock, so
    /// a worker between its check and its wait cannot miss it.)
    fn wake_all(&self) {
        drop(self.state.lock());
        self.counted.notify_all();
    }

    /// The base of chunk `index`, waiting for the counts before it; `None` if it will never
    /// be known or `cancelled` is set.
    fn wait_for(&self, index: usize, cancelled: &AtomicBool) -> Option<u32> {
        let mut state = self.state.lock().ok()?;
        loop {
            if let Some(base) = state.bases.get(index).copied().flatten() {
                return Some(base);
            }
            if state.broken || cancelled.load(Ordering::Relaxed) {
                return None;
            }
            state = self.counted.wait(state).ok()?;
        }
    }
}

/// A string as a worker knows it: an id in the region's own string table, or the memo index of
/// a string an earlier region defined that the worker was not told of (resolved at the splice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum StrRef {
    Local(u32),
    Earlier(u32),
}

/// A frame: one the region interned, or a memo index of an earlier region's frame record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FrameRef {
    Local(u32),
    Earlier(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct LocalFrame {
    filename: Option<StrRef>,
    line: u64,
    name: Option<StrRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum LocalStack {
    Frames(Box<[FrameRef]>),
    /// An earlier memo entry used as an entry's `frames` (a list or a stack record).
    Earlier(u32),
}

/// The local stack id of an empty `frames` list ([`StackTable::EMPTY`] everywhere).
const LOCAL_EMPTY: u32 = u32::MAX;

/// A `compile_context` is "no text" when it says "N/A"; a `user_metadata` is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct LocalText {
    text: StrRef,
    is_context: bool,
}

/// The tables that make a region's own ids (in its rows) the trace's, built at the splice and
/// applied by the column threads, so the splicing thread never touches a row.
#[derive(Debug)]
pub(super) struct RegionIds {
    stacks: Vec<StackId>,
    /// By local text id - 1 (local 0 is "no text").
    texts: Vec<u32>,
    actions: Vec<ActionCode>,
}

impl RegionIds {
    /// The trace's id of a region's stack.
    #[inline]
    pub(super) fn stack(&self, local: StackId) -> StackId {
        match local {
            LOCAL_EMPTY => StackTable::EMPTY,
            local => self.stacks[local as usize],
        }
    }

    /// The trace's id of a region's text (0, no text, stays 0).
    #[inline]
    pub(super) fn text(&self, local: u32) -> u32 {
        match local {
            0 => 0,
            local => self.texts[local as usize - 1],
        }
    }

    /// The trace's code of a region's action.
    #[inline]
    pub(super) fn action(&self, local: ActionCode) -> ActionCode {
        self.actions[usize::from(local.0)]
    }
}

/// What a memo put in the region named.
#[derive(Debug, Clone, Copy)]
enum MemoOut {
    Str(u32),
    Frame(u32),
    Stack(u32),
    Entry(u32),
}

/// A region's memo puts, laid out as the memo lays out its blocks where they fill whole ones
/// (see [`Memo::extend_blocks`]), so that the splice sets them in one step per put that does
/// not count up rather than every put laid out again on the main thread.
#[derive(Debug, Default)]
struct RegionMemo {
    /// The puts before the first whole block.
    head: Vec<MemoOut>,
    /// Whole blocks: which entries are rows counting up, and the first of those rows.
    blocks: Vec<(u64, u32)>,
    /// The puts of the blocks that are not rows counting up, in order.
    others: Vec<MemoOut>,
    /// The puts after the last whole block.
    tail: Vec<MemoOut>,
}

impl RegionMemo {
    /// How many puts the region made.
    fn len(&self) -> usize {
        let counted: u32 = self
            .blocks
            .iter()
            .map(|(counting, _)| counting.count_ones())
            .sum();
        self.head.len() + self.others.len() + self.tail.len() + counted as usize
    }

    /// Sets the puts in `memo` from its next index on, each as `value_of` says.
    fn set_in(&self, memo: &mut Memo, value_of: impl Fn(&MemoOut) -> Value) {
        memo.extend(self.head.iter().map(&value_of));
        if !self.blocks.is_empty() {
            let blocks: Vec<CountedBlock> = self
                .blocks
                .iter()
                .map(|&(counting, first)| CountedBlock {
                    counting,
                    base: value_of(&MemoOut::Entry(first)),
                })
                .collect();
            memo.extend_blocks(&blocks, self.others.iter().map(&value_of));
        }
        memo.extend(self.tail.iter().map(&value_of));
    }

    /// The layout of `puts`, the first at memo index `base`.
    fn of(base: u32, puts: &[MemoOut]) -> Self {
        let block = Memo::BLOCK as u64;
        let (base, end) = (u64::from(base), u64::from(base) + puts.len() as u64);
        let first = (Memo::HOT as u64).max(base.div_ceil(block) * block);
        let last = end / block * block;
        if first >= last {
            return Self {
                head: puts.to_vec(),
                ..Self::default()
            };
        }
        let (head, rest) = puts.split_at((first - base) as usize);
        let (whole, tail) = rest.split_at((last - first) as usize);
        let mut blocks = Vec::with_capacity(whole.len() / Memo::BLOCK);
        let mut others = Vec::new();
        for puts in whole.chunks_exact(Memo::BLOCK) {
            // The run starts at the block's first row (no bit set yet) and takes each row one
            // past the last it took.
            let (mut counting, mut first_row, mut next) = (0u64, 0, None);
            for (bit, &put) in puts.iter().enumerate() {
                match put {
                    MemoOut::Entry(row) if counting == 0 => {
                        (counting, first_row, next) = (1 << bit, row, row.checked_add(1));
                    }
                    MemoOut::Entry(row) if next == Some(row) => {
                        counting |= 1 << bit;
                        next = row.checked_add(1);
                    }
                    _ => others.push(put),
                }
            }
            blocks.push((counting, first_row));
        }
        Self {
            head: head.to_vec(),
            blocks,
            others,
            tail: tail.to_vec(),
        }
    }
}

/// What the region leaves to do on the machine's stack.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// Rows `first..first + count`, one entry after another.
    Entries {
        first: u32,
        count: u32,
    },
    Mark,
    Appends,
    Append,
}

/// One region decoded by a worker.
#[derive(Debug, Default)]
pub(crate) struct Region {
    start: u64,
    end: u64,
    memo_base: u32,
    ops: Vec<Op>,
    /// With the region's own stack, text and action ids (see [`RegionIds`]).
    rows: Vec<Row>,
    /// `device_free` of the rows that carry one, by row.
    device_free: Vec<(u32, u64)>,
    frames: Vec<LocalFrame>,
    stacks: Vec<LocalStack>,
    texts: Vec<LocalText>,
    actions: Vec<StrRef>,
    memo: RegionMemo,
    /// The region's string table: every text it decoded (which a sequential decode would have
    /// interned in its heap) and the known ones it used.
    strings: Vec<Arc<str>>,
    /// Heap bytes a sequential decode would have kept for floats and long integers.
    unstored_bytes: u64,
    /// The deepest MARK nesting inside one entry.
    inner_depth: usize,
}

/// A decoded value, as much of it as the splice needs (small and `Copy`: the worker's stack
/// holds millions of them over a region).
#[derive(Debug, Clone, Copy)]
enum W {
    /// None or a float: no field of an entry or a frame reads it.
    Scalar,
    Bool(bool),
    /// An integer that fits 60 bits (as [`Value::small_int`] keeps it).
    Int(i64),
    /// Any other integer: an index into the worker's long integers.
    Big(u32),
    Str(StrRef),
    Dict(u32),
    List(u32),
    Frame(FrameRef),
    Stack(u32),
    /// A finished entry (a top-level item).
    Entry(u32),
    /// An earlier memo entry that is not a string the worker was told of.
    Earlier(u32),
}

/// A long integer as [`Heap::i64`] and [`Heap::u64`] read it.
#[derive(Debug, Clone, Copy)]
struct Long {
    i64: Option<i64>,
    u64: Option<u64>,
}

impl Long {
    fn of(bytes: &[u8]) -> Self {
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let fill = if negative { 0xff } else { 0 };
        let n = bytes.len().min(8);
        let i64 = if bytes.len() > 8 && bytes[8..].iter().any(|&b| b != fill) {
            None
        } else {
            let mut buf = [fill; 8];
            buf[..n].copy_from_slice(&bytes[..n]);
            let result = i64::from_le_bytes(buf);
            ((result < 0) == negative).then_some(result)
        };
        let u64 = if negative || (bytes.len() > 8 && bytes[8..].iter().any(|&b| b != 0)) {
            None
        } else {
            let mut buf = [0; 8];
            buf[..n].copy_from_slice(&bytes[..n]);
            Some(u64::from_le_bytes(buf))
        };
        Self { i64, u64 }
    }
}

/// Why a worker stopped inside an entry: the region ends before it.
struct Stop;

/// Memo strings the main thread had decoded when the workers started, by memo index.
type KnownStrings = Arc<Vec<Option<Arc<str>>>>;

/// Whether an entry starts at `at`: EMPTY_DICT, MEMOIZE, MARK and the key "action".
fn is_entry_start(data: &[u8], at: usize, known: &[Option<Arc<str>>]) -> bool {
    let Some(head) = data.get(at..at + 4) else {
        return false;
    };
    if head[..3] != [b'}', MEMOIZE, b'('] {
        return false;
    }
    let key_at = at + 3;
    let known_is_action = |index: usize| {
        known
            .get(index)
            .and_then(Option::as_deref)
            .is_some_and(|text| text == "action")
    };
    match head[3] {
        b'h' => data
            .get(key_at + 1)
            .is_some_and(|&i| known_is_action(usize::from(i))),
        b'j' => data.get(key_at + 1..key_at + 5).is_some_and(|b| {
            known_is_action(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        }),
        0x8c => data.get(key_at + 1..key_at + 8) == Some(b"\x06action"),
        _ => false,
    }
}

/// Decodes the region of `chunk`: from its first entry start to the first entry start at or
/// after its end (or where a worker must stop). `None` when the chunk holds no entry start.
fn decode_region(
    data: &[u8],
    chunk: Chunk,
    memo_base: u32,
    known: &[Option<Arc<str>>],
    limits: &Limits,
) -> Option<Region> {
    // The first entry start, counting the puts before it.
    let mut at = chunk.start;
    let mut puts = memo_base;
    while at < chunk.end {
        if is_entry_start(data, at, known) {
            break;
        }
        if data[at] == MEMOIZE {
            puts = puts.checked_add(1)?;
        }
        at += crate::pickle::scan::opcode_len(data, at)?;
    }
    if at >= chunk.end {
        return None;
    }
    let mut worker = Worker::new(data, known, limits, at, puts);
    // Room for as many rows as the bytes can hold, so the rows are not copied as they grow
    // (the unused room is address space only). Capped, and asked without aborting, so a chunk
    // that is one huge frame of a hostile file reserves no more than a normal one's worth.
    const MOST_ROWS_RESERVED: u64 = 1 << 20;
    let most_rows = ((chunk.end - at) as u64 / BYTES_PER_ROW_AT_LEAST + 1).min(MOST_ROWS_RESERVED);
    let _ = worker.region.rows.try_reserve(most_rows as usize);
    match worker.run(chunk.end, None) {
        Ok(()) => worker.finish(),
        Err(stopped_at) => {
            // Decode again up to the entry that stopped it, so that nothing of that entry
            // (a frame or text it interned) is left in the tables.
            let mut worker = Worker::new(data, known, limits, at, puts);
            worker.run(chunk.end, Some(stopped_at)).ok()?;
            worker.finish()
        }
    }
}

/// What a dict or list in a worker became: nothing yet, a frame, an entry or a stack.
#[derive(Debug, Clone, Copy, Default)]
struct Container {
    filled: bool,
    done: Option<W>,
}

/// Known strings a worker remembers in front of its map (see [`Worker::fetch`]).
const RECENT_KNOWN: usize = 64;

struct Worker<'a> {
    data: &'a [u8],
    known: &'a [Option<Arc<str>>],
    limits: &'a Limits,
    at: usize,
    region: Region,
    stack: Vec<W>,
    marks: Vec<usize>,
    /// Memo values of this region, by index from `region.memo_base`.
    memo: Vec<W>,
    dicts: Vec<Container>,
    lists: Vec<Container>,
    /// The items of the list being filled, by list (a `frames` list at a time in practice).
    list_items: FxHashMap<u32, Vec<FrameRef>>,
    spare_items: Vec<Vec<FrameRef>>,
    longs: Vec<Long>,
    frame_ids: FxHashMap<LocalFrame, u32>,
    stack_ids: FxHashMap<Box<[FrameRef]>, u32>,
    earlier_stack_ids: FxHashMap<u32, u32>,
    text_ids: FxHashMap<LocalText, u32>,
    action_ids: FxHashMap<StrRef, u8>,
    /// Local string ids by decoded bytes, by text, and by the memo index of a known string.
    string_of_bytes: FxHashMap<Box<[u8]>, u32>,
    string_of_text: FxHashMap<Arc<str>, u32>,
    string_of_known: FxHashMap<u32, u32>,
    /// In front of `string_of_known`: (memo index + 1, local id) by index modulo its length;
    /// 0 is no entry.
    recent_known: [(u32, u32); RECENT_KNOWN],
    /// The field each local string names as a key.
    fields: Vec<Field>,
}

impl<'a> Worker<'a> {
    /// A worker for one region, from `start` of `data`, its first put at memo index
    /// `memo_base`. (A worker per region, not per thread: a thread's worker would keep its
    /// tables' room while held back; it saved page faults but no time on a 16-core host.)
    fn new(
        data: &'a [u8],
        known: &'a [Option<Arc<str>>],
        limits: &'a Limits,
        start: usize,
        memo_base: u32,
    ) -> Self {
        Self {
            data,
            known,
            limits,
            at: start,
            region: Region {
                start: start as u64,
                memo_base,
                ..Region::default()
            },
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            dicts: Vec::new(),
            lists: Vec::new(),
            list_items: FxHashMap::default(),
            spare_items: Vec::new(),
            longs: Vec::new(),
            frame_ids: FxHashMap::default(),
            stack_ids: FxHashMap::default(),
            earlier_stack_ids: FxHashMap::default(),
            text_ids: FxHashMap::default(),
            action_ids: FxHashMap::default(),
            string_of_bytes: FxHashMap::default(),
            string_of_text: FxHashMap::default(),
            string_of_known: FxHashMap::default(),
            recent_known: [(0, 0); RECENT_KNOWN],
            fields: Vec::new(),
        }
    }

    /// The region decoded; `None` if one of its memo puts named something the splice cannot
    /// set (a container that became neither a frame, an entry nor a stack).
    fn finish(mut self) -> Option<Region> {
        let mut memo = Vec::with_capacity(self.memo.len());
        for value in &self.memo {
            memo.push(match *value {
                W::Str(StrRef::Local(text)) => MemoOut::Str(text),
                W::Dict(d) => match self.dicts[d as usize].done {
                    Some(W::Frame(FrameRef::Local(f))) => MemoOut::Frame(f),
                    Some(W::Entry(row)) => MemoOut::Entry(row),
                    _ => return None,
                },
                W::List(l) => match self.lists[l as usize].done {
                    Some(W::Stack(s)) => MemoOut::Stack(s),
                    _ => return None,
                },
                _ => return None,
            });
        }
        self.region.memo = RegionMemo::of(self.region.memo_base, &memo);
        self.region.end = self.at as u64;
        Some(self.region)
    }

    /// Decodes top-level items until an entry starts at or after `end_hint`, a top-level
    /// opcode that is not an entry, MARK, APPENDS or APPEND, or `stop_at`. `Err(offset)`: an
    /// entry starting at `offset` could not be decoded here.
    fn run(&mut self, end_hint: usize, stop_at: Option<usize>) -> Result<(), usize> {
        loop {
            let item_start = self.at;
            if stop_at.is_some_and(|stop| item_start >= stop) {
                return Ok(());
            }
            let Some(&opcode) = self.data.get(item_start) else {
                return Ok(());
            };
            match opcode {
                FRAME if item_start + 9 <= self.data.len() => self.at += 9,
                b'(' => {
                    self.region.ops.push(Op::Mark);
                    self.at += 1;
                }
                b'e' => {
                    self.region.ops.push(Op::Appends);
                    self.at += 1;
                }
                b'a' => {
                    self.region.ops.push(Op::Append);
                    self.at += 1;
                }
                b'}' => {
                    if item_start >= end_hint && is_entry_start(self.data, item_start, self.known) {
                        return Ok(());
                    }
                    match self.item() {
                        Ok(row) => match self.region.ops.last_mut() {
                            Some(Op::Entries { first, count }) if *first + *count == row => {
                                *count += 1;
                            }
                            _ => self.region.ops.push(Op::Entries {
                                first: row,
                                count: 1,
                            }),
                        },
                        Err(Stop) => return Err(item_start),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// One top-level entry, from its EMPTY_DICT to its SETITEMS.
    fn item(&mut self) -> Result<u32, Stop> {
        self.stack.clear();
        self.marks.clear();
        self.flat_entry()?;
        loop {
            if self.marks.is_empty() && self.stack.len() == 1 {
                match self.stack[0] {
                    W::Entry(row) => {
                        self.stack.clear();
                        return Ok(row);
                    }
                    W::Dict(_) => {}
                    _ => return Err(Stop),
                }
            }
            self.step()?;
        }
    }

    /// The opcodes of a flat entry, `} MEMOIZE MARK (key value [MEMOIZE])* SETITEMS`, each done
    /// as [`Worker::step`] does it, in a loop whose branches follow the key-value rhythm (the
    /// one dispatch of `step` for every opcode mispredicts often). It returns before any other
    /// opcode, and `item` goes on from there with `step`: the same entry, in fewer steps.
    #[inline(always)]
    fn flat_entry(&mut self) -> Result<(), Stop> {
        let data: &'a [u8] = self.data;
        if data.get(self.at..self.at + 3) != Some(&[b'}', MEMOIZE, b'('])
            || self.limits.max_depth == 0
        {
            return Ok(());
        }
        self.at += 3;
        self.dicts.push(Container::default());
        let dict = W::Dict(self.dicts.len() as u32 - 1);
        self.stack.push(dict);
        self.memo.push(dict);
        self.marks.push(self.stack.len());
        self.region.inner_depth = self.region.inner_depth.max(self.marks.len());
        loop {
            let key = match data.get(self.at) {
                Some(b'h') => {
                    self.at += 1;
                    u32::from(self.byte()?)
                }
                Some(b'j') => {
                    self.at += 1;
                    self.u32_le()?
                }
                Some(b'u') => {
                    self.at += 1;
                    return self.set_items();
                }
                _ => return Ok(()),
            };
            let key = self.fetch(key)?;
            self.stack.push(key);
            let value = match data.get(self.at) {
                Some(b'h') => {
                    self.at += 1;
                    let index = u32::from(self.byte()?);
                    Some(self.fetch(index)?)
                }
                Some(b'j') => {
                    self.at += 1;
                    let index = self.u32_le()?;
                    Some(self.fetch(index)?)
                }
                Some(b'K') => {
                    self.at += 1;
                    Some(W::Int(i64::from(self.byte()?)))
                }
                Some(b'M') => {
                    self.at += 1;
                    let b = self.bytes(2)?;
                    Some(W::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))))
                }
                Some(b'J') => {
                    self.at += 1;
                    let b = self.bytes(4)?;
                    Some(W::Int(i64::from(i32::from_le_bytes([
                        b[0], b[1], b[2], b[3],
                    ]))))
                }
                Some(0x8a) => {
                    self.at += 1;
                    let n = usize::from(self.byte()?);
                    let bytes = self.bytes(n)?;
                    Some(self.long(bytes))
                }
                Some(0x8c) => {
                    // `string` pushes what it decodes.
                    self.at += 1;
                    let len = self.byte()?;
                    self.string(u64::from(len))?;
                    None
                }
                Some(b']') => {
                    self.at += 1;
                    self.lists.push(Container::default());
                    Some(W::List(self.lists.len() as u32 - 1))
                }
                Some(b'N') => {
                    self.at += 1;
                    Some(W::Scalar)
                }
                _ => return Ok(()),
            };
            if let Some(value) = value {
                self.stack.push(value);
            }
            if data.get(self.at) == Some(&MEMOIZE) {
                // The value is above the MARK; what `step` memoizes, and nothing else.
                self.at += 1;
                match self.stack.last() {
                    Some(&top @ (W::Str(StrRef::Local(_)) | W::Dict(_) | W::List(_))) => {
                        self.memo.push(top);
                    }
                    _ => return Err(Stop),
                }
            }
        }
    }

    #[inline]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Stop> {
        let data: &'a [u8] = self.data;
        let bytes = data
            .get(self.at..self.at.checked_add(n).ok_or(Stop)?)
            .ok_or(Stop)?;
        self.at += n;
        Ok(bytes)
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, Stop> {
        let byte = *self.data.get(self.at).ok_or(Stop)?;
        self.at += 1;
        Ok(byte)
    }

    #[inline]
    fn u32_le(&mut self) -> Result<u32, Stop> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// The local id of `text`, adding it to the region's table.
    fn string_id(&mut self, text: Arc<str>) -> u32 {
        let next = self.region.strings.len() as u32;
        let id = *self.string_of_text.entry(text.clone()).or_insert(next);
        if id == next {
            self.region.strings.push(text.clone());
            self.fields.push(field_of_name(&text));
        }
        id
    }

    fn string(&mut self, len: u64) -> Result<(), Stop> {
        if len > self.limits.max_string_bytes {
            return Err(Stop);
        }
        let bytes = self.bytes(usize::try_from(len).map_err(|_| Stop)?)?;
        let id = match self.string_of_bytes.get(bytes) {
            Some(&id) => id,
            None => {
                let text: Arc<str> = match std::str::from_utf8(bytes) {
                    Ok(text) => Arc::from(text),
                    Err(_) => Arc::from(String::from_utf8_lossy(bytes).as_ref()),
                };
                let id = self.string_id(text);
                self.string_of_bytes.insert(bytes.into(), id);
                id
            }
        };
        self.stack.push(W::Str(StrRef::Local(id)));
        Ok(())
    }

    /// The value a memo fetch yields.
    #[inline]
    fn fetch(&mut self, index: u32) -> Result<W, Stop> {
        let Some(local) = index.checked_sub(self.region.memo_base) else {
            // Most earlier fetches are of an entry's keys (a few known strings, fetched again
            // and again: a small table answers them before the map) or of frames (not known
            // strings: no map lookup at all).
            let slot = index as usize % RECENT_KNOWN;
            let (recent, id) = self.recent_known[slot];
            if recent == index.wrapping_add(1) {
                return Ok(W::Str(StrRef::Local(id)));
            }
            let Some(Some(text)) = self.known.get(index as usize) else {
                return Ok(W::Earlier(index));
            };
            let id = match self.string_of_known.get(&index) {
                Some(&id) => id,
                None => {
                    let id = self.string_id(text.clone());
                    self.string_of_known.insert(index, id);
                    id
                }
            };
            self.recent_known[slot] = (index.wrapping_add(1), id);
            return Ok(W::Str(StrRef::Local(id)));
        };
        match *self.memo.get(local as usize).ok_or(Stop)? {
            value @ W::Str(_) => Ok(value),
            // A finished dict or list yields what it became; an unfinished one (a structure
            // that refers to itself) is left to the sequential decoder.
            W::Dict(d) => match self.dicts[d as usize].done {
                Some(done @ W::Frame(_)) => Ok(done),
                _ => Err(Stop),
            },
            W::List(l) => match self.lists[l as usize].done {
                Some(done @ W::Stack(_)) => Ok(done),
                _ => Err(Stop),
            },
            _ => Err(Stop),
        }
    }

    fn step(&mut self) -> Result<(), Stop> {
        let opcode = self.byte()?;
        match opcode {
            b'h' => {
                let index = u32::from(self.byte()?);
                let value = self.fetch(index)?;
                self.stack.push(value);
            }
            b'j' => {
                let index = self.u32_le()?;
                let value = self.fetch(index)?;
                self.stack.push(value);
            }
            MEMOIZE => {
                if self.stack.len() <= self.floor() {
                    return Err(Stop);
                }
                let top = *self.stack.last().ok_or(Stop)?;
                match top {
                    W::Str(StrRef::Local(_)) | W::Dict(_) | W::List(_) => self.memo.push(top),
                    _ => return Err(Stop),
                }
            }
            0x8a => {
                let n = usize::from(self.byte()?);
                let bytes = self.bytes(n)?;
                let value = self.long(bytes);
                self.stack.push(value);
            }
            b'K' => {
                let v = self.byte()?;
                self.stack.push(W::Int(i64::from(v)));
            }
            b'M' => {
                let b = self.bytes(2)?;
                self.stack
                    .push(W::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))));
            }
            b'J' => {
                let b = self.bytes(4)?;
                self.stack.push(W::Int(i64::from(i32::from_le_bytes([
                    b[0], b[1], b[2], b[3],
                ]))));
            }
            0x8c => {
                let len = self.byte()?;
                self.string(u64::from(len))?;
            }
            b'X' => {
                let len = self.u32_le()?;
                self.string(u64::from(len))?;
            }
            0x8d => {
                let b = self.bytes(8)?;
                let mut len = [0u8; 8];
                len.copy_from_slice(b);
                self.string(u64::from_le_bytes(len))?;
            }
            b'}' => {
                self.dicts.push(Container::default());
                self.stack.push(W::Dict(self.dicts.len() as u32 - 1));
            }
            b']' => {
                self.lists.push(Container::default());
                self.stack.push(W::List(self.lists.len() as u32 - 1));
            }
            b'(' => {
                if self.marks.len() >= self.limits.max_depth {
                    return Err(Stop);
                }
                self.marks.push(self.stack.len());
                self.region.inner_depth = self.region.inner_depth.max(self.marks.len());
            }
            b'u' => self.set_items()?,
            b'e' => {
                let from = self.marks.pop().ok_or(Stop)?;
                self.append_frames(from)?;
            }
            b'a' => {
                if self.stack.len() < self.floor() + 2 {
                    return Err(Stop);
                }
                let from = self.stack.len() - 1;
                self.append_frames(from)?;
            }
            b'N' => self.stack.push(W::Scalar),
            0x88 => self.stack.push(W::Bool(true)),
            0x89 => self.stack.push(W::Bool(false)),
            b'G' => {
                self.bytes(8)?;
                // The sequential decoder keeps every float in its heap.
                self.region.unstored_bytes += 8;
                self.stack.push(W::Scalar);
            }
            FRAME => {
                self.bytes(8)?;
            }
            _ => return Err(Stop),
        }
        Ok(())
    }

    /// A LONG1 integer as [`Heap::push_long`] keeps it, counting the bytes the heap would
    /// store for one beyond 60 bits.
    fn long(&mut self, bytes: &[u8]) -> W {
        if let Some(value) =
            Heap::long_within_i64(bytes).filter(|&value| Value::small_int(value).is_some())
        {
            return W::Int(value);
        }
        self.region.unstored_bytes += bytes.len() as u64;
        self.longs.push(Long::of(bytes));
        W::Big(self.longs.len() as u32 - 1)
    }

    /// As [`Heap::i64`] reads `value`.
    fn i64(&self, value: W) -> Option<i64> {
        match value {
            W::Int(v) => Some(v),
            W::Bool(b) => Some(i64::from(b)),
            W::Big(long) => self.longs[long as usize].i64,
            _ => None,
        }
    }

    /// As [`Heap::u64`] reads `value`.
    fn u64(&self, value: W) -> Option<u64> {
        match value {
            W::Int(_) | W::Bool(_) => u64::try_from(self.i64(value)?).ok(),
            W::Big(long) => self.longs[long as usize].u64,
            _ => None,
        }
    }

    /// APPEND(S) of `stack[from..]` to the list below: frames into a `frames` list.
    fn append_frames(&mut self, from: usize) -> Result<(), Stop> {
        let list = match from.checked_sub(1).map(|i| (i, self.stack[i])) {
            Some((i, W::List(l))) if i >= self.floor() => l,
            _ => return Err(Stop),
        };
        if self.lists[list as usize].done.is_some() {
            return Err(Stop);
        }
        let spare = &mut self.spare_items;
        let items = self
            .list_items
            .entry(list)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        for item in self.stack.drain(from..) {
            match item {
                W::Frame(frame) => items.push(frame),
                W::Earlier(index) => items.push(FrameRef::Earlier(index)),
                _ => return Err(Stop),
            }
        }
        Ok(())
    }

    /// SETITEMS: a fresh dict filled once becomes a frame or an entry, as the compactor makes
    /// them; any other dict is left to the sequential decoder.
    fn set_items(&mut self) -> Result<(), Stop> {
        let from = self.marks.pop().ok_or(Stop)?;
        let dict = match from.checked_sub(1).map(|i| (i, self.stack[i])) {
            Some((i, W::Dict(d))) if i >= self.floor() => d as usize,
            _ => return Err(Stop),
        };
        // The items are read where they are on the stack (taken out for the call).
        let stack = std::mem::take(&mut self.stack);
        let done = self.record(dict, from, &stack[from..]);
        self.stack = stack;
        self.stack.truncate(from);
        let done = done?;
        self.dicts[dict].done = Some(done);
        self.stack[from - 1] = done;
        Ok(())
    }

    fn record(&mut self, dict: usize, from: usize, items: &[W]) -> Result<W, Stop> {
        if self.dicts[dict].filled || !items.len().is_multiple_of(2) {
            return Err(Stop);
        }
        self.dicts[dict].filled = true;
        let mut frames_at = None;
        for (i, pair) in items.chunks_exact(2).enumerate() {
            if self.field(pair[0])? == Field::Frames {
                frames_at = Some(2 * i + 1);
            }
        }
        // A list or dict kept inside a record (anywhere but an entry's `frames`) would stay a
        // container in a sequential decode: not modelled here.
        if items.iter().enumerate().any(|(i, item)| {
            matches!(item, W::Dict(_)) || (matches!(item, W::List(_)) && Some(i) != frames_at)
        }) {
            return Err(Stop);
        }
        let first_key = *items.first().ok_or(Stop)?;
        Ok(match self.field(first_key)? {
            Field::Filename | Field::Line | Field::Name if items.len() <= 8 => {
                W::Frame(FrameRef::Local(self.frame(items)?))
            }
            // Only a top-level entry (the dict alone on the worker's stack) is a row here.
            Field::Action if from == 1 => W::Entry(self.entry(items)?),
            _ => return Err(Stop),
        })
    }

    #[inline]
    fn field(&self, key: W) -> Result<Field, Stop> {
        match key {
            W::Str(StrRef::Local(id)) => Ok(self.fields[id as usize]),
            // A key the worker cannot read: left to the sequential decoder.
            W::Str(StrRef::Earlier(_)) | W::Earlier(_) => Err(Stop),
            _ => Ok(Field::Other),
        }
    }

    /// A frame dict, as `TraceCompactor::frame` reads it.
    fn frame(&mut self, items: &[W]) -> Result<u32, Stop> {
        let mut frame = LocalFrame {
            filename: None,
            line: 0,
            name: None,
        };
        for pair in items.chunks_exact(2) {
            // A fetched earlier value that may or may not be a string: not modelled.
            if matches!(pair[1], W::Earlier(_)) {
                return Err(Stop);
            }
            let text = match pair[1] {
                W::Str(text) => Some(text),
                _ => None,
            };
            match self.field(pair[0])? {
                Field::Filename => frame.filename = text,
                Field::Name => frame.name = text,
                Field::Line => frame.line = self.u64(pair[1]).unwrap_or(0),
                _ => {}
            }
        }
        if frame.filename.is_none() && frame.name.is_none() {
            return Err(Stop);
        }
        let next = self.region.frames.len() as u32;
        let id = *self.frame_ids.entry(frame).or_insert(next);
        if id == next {
            self.region.frames.push(frame);
        }
        Ok(id)
    }

    /// A trace entry, as `TraceCompactor::event` reads it.
    fn entry(&mut self, items: &[W]) -> Result<u32, Stop> {
        const ABSENT: usize = usize::MAX;
        let mut at = [ABSENT; 10];
        for (i, pair) in items.chunks_exact(2).enumerate() {
            let slot = match self.field(pair[0])? {
                Field::Action => 0,
                Field::Addr => 1,
                Field::Size => 2,
                Field::Stream => 3,
                Field::TimeUs => 4,
                Field::Frames => 5,
                Field::CompileContext => 6,
                Field::UserMetadata => 7,
                Field::DeviceFree => 8,
                Field::Category => 9,
                _ => continue,
            };
            // A key set twice keeps its last value, as Python's dict does.
            at[slot] = 2 * i + 1;
        }
        let value = |slot: usize| items.get(at[slot]).copied();
        // A fetched earlier value in a field the row reads as a number: its kind is unknown.
        if [1, 2, 3, 4, 8]
            .iter()
            .any(|&slot| matches!(value(slot), Some(W::Earlier(_))))
        {
            return Err(Stop);
        }
        let int = |slot: usize| value(slot).map_or(0, |v| self.u64(v).unwrap_or(0));
        let (addr, size, stream) = (int(1), int(2), int(3));
        let time_us = value(4).and_then(|v| self.i64(v));
        let device_free = value(8).and_then(|v| self.u64(v));
        let action = match value(0) {
            Some(W::Str(action)) => action,
            Some(W::Earlier(index)) => StrRef::Earlier(index),
            _ => return Err(Stop),
        };
        // Categories (profiler snapshots) are left to the sequential decoder.
        if matches!(value(9), Some(W::Str(_) | W::Earlier(_))) {
            return Err(Stop);
        }
        let context = match value(6) {
            Some(W::Str(text)) => self.text(text, true),
            Some(W::Earlier(index)) => self.text(StrRef::Earlier(index), true),
            _ => 0,
        };
        let metadata = match value(7) {
            None => 0,
            Some(W::Str(text)) => self.text(text, false),
            Some(W::Earlier(index)) => self.text(StrRef::Earlier(index), false),
            // Non-text metadata is converted to JSON by the sequential decoder.
            Some(_) => return Err(Stop),
        };
        let stack = match value(5) {
            None => LOCAL_EMPTY,
            Some(W::List(l)) => self.list_stack(l)?,
            Some(W::Stack(s)) => s,
            Some(W::Earlier(index)) => {
                let next = self.region.stacks.len() as u32;
                let id = *self.earlier_stack_ids.entry(index).or_insert(next);
                if id == next {
                    self.region.stacks.push(LocalStack::Earlier(index));
                }
                id
            }
            Some(_) => return Err(Stop),
        };
        let action = match self.action_ids.get(&action) {
            Some(&id) => id,
            // A row keeps its action in a byte; a region with more distinct ones than that
            // (no file torch writes has) ends before this entry.
            None if self.region.actions.len() > usize::from(u8::MAX) => return Err(Stop),
            None => {
                let id = self.region.actions.len() as u8;
                self.action_ids.insert(action, id);
                self.region.actions.push(action);
                id
            }
        };
        let row = self.region.rows.len() as u32;
        if let Some(free) = device_free {
            self.region.device_free.push((row, free));
        }
        self.region.rows.push(Row {
            addr,
            size,
            stream,
            time_us: time_us.unwrap_or(0),
            stack,
            context,
            metadata,
            action: ActionCode(action),
            has_time: time_us.is_some(),
        });
        Ok(row)
    }

    fn text(&mut self, text: StrRef, is_context: bool) -> u32 {
        if let StrRef::Local(id) = text {
            let known = &self.region.strings[id as usize];
            if known.is_empty() || (is_context && &**known == "N/A") {
                return 0;
            }
        }
        let key = LocalText { text, is_context };
        let next = self.region.texts.len() as u32 + 1;
        let id = *self.text_ids.entry(key).or_insert(next);
        if id == next {
            self.region.texts.push(key);
        }
        id
    }

    fn list_stack(&mut self, list: u32) -> Result<u32, Stop> {
        if self.lists[list as usize].done.is_some() {
            return Err(Stop);
        }
        let stack = match self.list_items.remove(&list) {
            None => LOCAL_EMPTY,
            Some(mut items) if items.is_empty() => {
                self.spare_items.push(std::mem::take(&mut items));
                LOCAL_EMPTY
            }
            Some(mut items) => {
                let id = match self.stack_ids.get(items.as_slice()) {
                    Some(&id) => id,
                    None => {
                        let id = self.region.stacks.len() as u32;
                        let frames: Box<[FrameRef]> = items.as_slice().into();
                        self.stack_ids.insert(frames.clone(), id);
                        self.region.stacks.push(LocalStack::Frames(frames));
                        id
                    }
                };
                items.clear();
                self.spare_items.push(items);
                id
            }
        };
        self.lists[list as usize].done = Some(W::Stack(stack));
        Ok(stack)
    }
}

impl<F: TraceFollower> TraceCompactor<'_, F> {
    /// Splices `region` in at the machine's `state`, or `None` (and nothing changed) when it
    /// does not hold there: then the machine decodes those bytes itself.
    fn splice_region(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        mut region: Region,
        state: MachineState<'_>,
    ) -> Result<Option<Splice>, PickleError> {
        if memo.next_index() != region.memo_base || !ops_hold(&region, state) {
            return Ok(None);
        }
        // Every earlier reference must resolve before anything changes. (Borrowed, not
        // cloned: the workers share these texts, and a clone is an atomic write to a line
        // another core holds.)
        let resolve = |text: &StrRef| -> Option<&Arc<str>> {
            match text {
                StrRef::Local(id) => region.strings.get(*id as usize),
                StrRef::Earlier(index) => heap.shared_str(memo.get(*index)?),
            }
        };
        let mut frames = Vec::with_capacity(region.frames.len());
        for frame in &region.frames {
            let filename = frame.filename.map(|text| resolve(&text).ok_or(()));
            let name = frame.name.map(|text| resolve(&text).ok_or(()));
            let (Ok(filename), Ok(name)) = (filename.transpose(), name.transpose()) else {
                return Ok(None);
            };
            frames.push((filename, name));
        }
        let mut texts = Vec::with_capacity(region.texts.len());
        for text in &region.texts {
            let Some(resolved) = resolve(&text.text) else {
                return Ok(None);
            };
            texts.push(resolved);
        }
        let mut actions = Vec::with_capacity(region.actions.len());
        for action in &region.actions {
            let Some(resolved) = resolve(action) else {
                return Ok(None);
            };
            actions.push(resolved);
        }
        // An earlier region's frames list is a stack record by now (read once here: these
        // memo reads are scattered over the whole memo); anything else is resolved below as
        // the sequential decoder would.
        let mut earlier_stacks = Vec::new();
        for stack in &region.stacks {
            let holds = match stack {
                LocalStack::Frames(refs) => refs.iter().all(|frame| match frame {
                    FrameRef::Local(_) => true,
                    FrameRef::Earlier(index) => earlier_frame(memo, *index).is_some(),
                }),
                // What `stack` reads without interning frames: a stack record, or a list of
                // frame records.
                LocalStack::Earlier(index) => memo.get(*index).is_some_and(|value| {
                    let holds = matches!(super::record_of(value), Some(super::Record::Stack(_)))
                        || (value.is(Kind::List)
                            && heap.items(value).is_some_and(|items| {
                                items.iter().all(|&item| {
                                    matches!(super::record_of(item), Some(super::Record::Frame(_)))
                                })
                            }));
                    earlier_stacks.push(value);
                    holds
                }),
            };
            if !holds {
                return Ok(None);
            }
        }

        // From here on the region is applied, each table (heap strings, frames, stacks, texts,
        // actions) interned in the order a sequential decode would have met its entries.
        let empty: Arc<str> = Arc::from("");
        let frame_ids: Vec<FrameId> = region
            .frames
            .iter()
            .zip(frames)
            .map(|(frame, (filename, name))| {
                self.frames.intern_parts(
                    filename.unwrap_or(&empty),
                    frame.line,
                    name.unwrap_or(&empty),
                )
            })
            .collect();
        let texts: Vec<u32> = region
            .texts
            .iter()
            .zip(texts)
            .map(|(local, text)| {
                if local.is_context && &**text == "N/A" {
                    0
                } else {
                    text_id(&mut self.events, &mut self.text_ids, text)
                }
            })
            .collect();
        let actions: Vec<ActionCode> = actions
            .iter()
            .map(|name| self.events.code_for(name))
            .collect();
        let strings: Vec<Value> = region
            .strings
            .iter()
            .map(|text| heap.intern_str(text))
            .collect();
        heap.count_unstored(region.unstored_bytes);
        let mut stack_ids: Vec<StackId> = Vec::with_capacity(region.stacks.len());
        let mut scratch = Vec::new();
        let mut earlier_stacks = earlier_stacks.into_iter();
        for stack in &region.stacks {
            let id = match stack {
                LocalStack::Frames(refs) => {
                    scratch.clear();
                    scratch.extend(refs.iter().map(|frame| match frame {
                        FrameRef::Local(local) => frame_ids[*local as usize],
                        FrameRef::Earlier(index) => {
                            earlier_frame(memo, *index).unwrap_or(FrameId::MAX)
                        }
                    }));
                    self.stacks.intern(&scratch)
                }
                LocalStack::Earlier(_) => match earlier_stacks.next() {
                    Some(value) => match super::record_of(value) {
                        Some(super::Record::Stack(stack)) => stack,
                        _ => {
                            // A fetch marks a container shared, so `stack` does not free a
                            // list another structure (a block's `frames`) still holds.
                            heap.note_shared(value);
                            self.stack(heap, memo, value)
                        }
                    },
                    None => StackTable::EMPTY,
                },
            };
            stack_ids.push(id);
        }
        let first_row = self.rows;
        let rows = std::mem::take(&mut region.rows);
        self.rows += rows.len();
        self.count.rows += rows.len() as u64;
        for &(row, free) in &region.device_free {
            self.events
                .device_free
                .insert(first_row + row as usize, free);
        }
        let value_of = |out: &MemoOut| match *out {
            MemoOut::Str(text) => strings[text as usize],
            MemoOut::Frame(local) => {
                Value::record(FRAME_RECORD | u64::from(frame_ids[local as usize]))
            }
            MemoOut::Stack(local) => Value::record(
                STACK_RECORD
                    | u64::from(match local {
                        LOCAL_EMPTY => StackTable::EMPTY,
                        local => stack_ids[local as usize],
                    }),
            ),
            MemoOut::Entry(row) => Value::record(EVENT_RECORD | (first_row + row as usize) as u64),
        };
        region.memo.set_in(memo, value_of);
        let ops = region
            .ops
            .iter()
            .map(|op| match op {
                Op::Entries { first, count } => SpliceOp::Records {
                    first: EVENT_RECORD | (first_row + *first as usize) as u64,
                    count: *count,
                },
                Op::Mark => SpliceOp::Mark,
                Op::Appends => SpliceOp::Appends,
                Op::Append => SpliceOp::Append,
            })
            .collect();
        let end = region.end;
        // The rows gathered before this region go first.
        self.flush();
        self.send(Batch {
            rows,
            ids: Some(RegionIds {
                stacks: stack_ids,
                texts,
                actions,
            }),
            _region: Some(region),
        });
        // The texts and stacks the recent-stack cache saw may have moved on; it only speeds
        // up the sequential path, so it starts afresh.
        self.recent_stacks = RecentStacks::default();
        self.count.counted()?;
        SPLICED.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Splice { end, ops }))
    }
}

/// The frame an earlier region's memo entry names, if it is a frame record.
fn earlier_frame(memo: &Memo, index: u32) -> Option<FrameId> {
    match memo.get(index).and_then(super::record_of) {
        Some(super::Record::Frame(frame)) => Some(frame),
        _ => None,
    }
}

/// Whether the region's top-level opcodes do, from `state`, what they did in the worker:
/// every MARK within the depth limit, every APPEND(S) onto a list of the machine's (the
/// region's own items are records), and the entries' inner MARKs within the limit too.
fn ops_hold(region: &Region, state: MachineState<'_>) -> bool {
    let mut marks: Vec<usize> = state.marks.to_vec();
    let mut len = state.stack.len();
    let is_list_below = |at: usize| at < state.stack.len() && state.stack[at].is(Kind::List);
    for op in &region.ops {
        match op {
            Op::Entries { count, .. } => {
                if marks.len() + region.inner_depth > state.max_depth {
                    return false;
                }
                len += *count as usize;
            }
            Op::Mark => {
                if marks.len() >= state.max_depth {
                    return false;
                }
                marks.push(len);
            }
            Op::Appends => {
                let Some(from) = marks.pop() else {
                    return false;
                };
                let floor = marks.last().copied().unwrap_or(0);
                match from.checked_sub(1) {
                    Some(list) if list >= floor && is_list_below(list) => len = from,
                    _ => return false,
                }
            }
            Op::Append => {
                let floor = marks.last().copied().unwrap_or(0);
                if len < floor + 2 || !is_list_below(len - 2) {
                    return false;
                }
                len -= 1;
            }
        }
    }
    true
}

/// Regions decoded ahead of the main thread by worker threads, handed over in file order.
pub(crate) struct Splicer<'scope, 'env> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    bytes: Landed<'env>,
    plan: Arc<ChunkPlan<'env>>,
    /// No chunk will be spliced (the workers could not start): the main thread decodes on.
    exhausted: bool,
    threads: usize,
    limits: Limits,
    /// The chunk whose region is awaited next.
    next: usize,
    /// A region received whose start the machine has not reached.
    pending: Option<Region>,
    workers: Option<Workers<'env>>,
    /// The file's map, when `data` is one: pages the decode has passed are handed back (by
    /// the workers, see [`PageRelease`]).
    map: Option<&'env memmap2::Mmap>,
    /// The scratch file `map` is of, if it is one (see [`MappedFile`]).
    scratch: Option<&'env std::fs::File>,
    /// How long the main thread waited for the workers' regions (logged at debug level: the
    /// time the workers, not the splice, set the pace).
    waited: std::time::Duration,
    /// How long the main thread spent splicing regions in (logged with `waited`).
    splicing: std::time::Duration,
    /// The CPU time of that (less than `splicing` when the thread waited, or was not run).
    splicing_cpu: std::time::Duration,
    /// What the regions spliced in held.
    tally: Tally,
}

/// What the regions spliced in held, all together (logged at debug level: the splice's work
/// grows with each of these).
#[derive(Debug, Default)]
struct Tally {
    regions: u64,
    puts: u64,
    strings: u64,
    frames: u64,
    stacks: u64,
    rows: u64,
}

impl Drop for Splicer<'_, '_> {
    fn drop(&mut self) {
        if let Some(workers) = &self.workers {
            let ms = |counter: &AtomicU64| counter.load(Ordering::Relaxed) / 1_000_000;
            let shared = &workers.shared;
            tracing::debug!(
                waited_ms = self.waited.as_millis() as u64,
                splicing_ms = self.splicing.as_millis() as u64,
                splicing_cpu_ms = self.splicing_cpu.as_millis() as u64,
                workers_decoding_ms = ms(&shared.decoding_ns),
                workers_decoding_cpu_ms = ms(&shared.decoding_cpu_ns),
                workers_held_back_ms = ms(&shared.held_back_ns),
                workers_awaiting_bases_ms = ms(&shared.awaiting_bases_ns),
                "regions spliced"
            );
            tracing::debug!(tally = ?self.tally, "regions spliced");
        }
    }
}

/// A pickle file mapped into memory, and the file itself (for reads that should not go
/// through the map).
#[derive(Debug, Clone, Copy)]
pub(crate) struct MappedFile<'a> {
    pub(crate) map: &'a memmap2::Mmap,
    pub(crate) file: &'a std::fs::File,
    /// The file is the decode's own scratch in memory (a decompressed input, see
    /// `load::zstd_frames`): pages passed are cut out of it, which frees them, where handing a
    /// disk file's pages back only drops this process's view of them.
    pub(crate) scratch: bool,
}

/// Hands the whole pages of `map[start..end]` back to the kernel.
fn release_pages(map: &memmap2::Mmap, start: usize, end: usize) {
    const PAGE: usize = 4096;
    let first = start.div_ceil(PAGE) * PAGE;
    let last = end.min(map.len()) / PAGE * PAGE;
    if last <= first {
        return;
    }
    // SAFETY: `map` is a read-only, shared mapping of a file (never anonymous memory, where
    // MADV_DONTNEED would zero the pages). It drops this process's copies of those pages; a
    // later read of them faults the same bytes back in from the page cache or the file, so no
    // byte anyone can see changes. `first..last` is within the map and page-aligned.
    let _ = unsafe {
        map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
    };
}

/// Pages of a mapped file are handed back in steps of this many bytes.
const RELEASE_STEP: usize = 16 << 20;

/// The worker threads' side: which chunk to take next, how far ahead of the main thread they
/// may run, and where results go.
struct Workers<'env> {
    results: Receiver<(usize, Option<Region>)>,
    received: BTreeMap<usize, Option<Region>>,
    shared: Arc<WorkShared<'env>>,
}

struct WorkShared<'env> {
    next_chunk: AtomicUsize,
    /// Chunks the main thread has taken; workers stay within `AHEAD` of it, so the regions
    /// waiting cost bounded memory.
    taken: Mutex<usize>,
    moved: Condvar,
    cancelled: AtomicBool,
    ahead: usize,
    bases: MemoBases,
    /// Nanoseconds the workers spent, all together, decoding; held back by `ahead` (the main
    /// thread set the pace); and waiting for their chunk's memo base. Logged at debug level.
    decoding_ns: AtomicU64,
    /// The CPU time of the decoding (not the counting).
    decoding_cpu_ns: AtomicU64,
    held_back_ns: AtomicU64,
    awaiting_bases_ns: AtomicU64,
    /// The map's pages the main thread has passed, released by the workers between chunks
    /// (an madvise that zaps page tables is not work for the thread that sets the pace).
    pages: Option<PageRelease<'env>>,
}

/// Hands the pages of a mapped file back to the kernel once every thread has read past them,
/// so a large file does not stay resident as it is decoded.
struct PageRelease<'a> {
    map: &'a memmap2::Mmap,
    /// The scratch file the map is of, whose pages are cut out too (see [`MappedFile`]).
    scratch: Option<&'a std::fs::File>,
    /// Told of what was handed back, when the bytes are landing (their writer may then land
    /// more, see [`Landing::room_until`]).
    landing: Option<&'a Landing>,
    /// The main thread reads on from here, and every chunk a worker has not finished starts
    /// after it.
    passed: AtomicUsize,
    /// Bytes of the map before this were handed back.
    released: Mutex<usize>,
}

impl PageRelease<'_> {
    /// Hands back what was passed, in steps of [`RELEASE_STEP`]; a thread that finds another
    /// doing so goes on with its work.
    fn release(&self) {
        let Ok(mut released) = self.released.try_lock() else {
            return;
        };
        let end = self.passed.load(Ordering::Relaxed);
        if end >= *released + RELEASE_STEP {
            release_pages(self.map, *released, end);
            if let Some(file) = self.scratch {
                // A step behind what is handed back: a read of a page cut out gives zeros, not
                // the bytes, so this keeps a step's margin behind the readers' position.
                cut_out(
                    file,
                    released.saturating_sub(RELEASE_STEP),
                    end.saturating_sub(RELEASE_STEP),
                );
            }
            if let Some(landing) = self.landing {
                landing.released(end);
            }
            *released = end;
        }
    }
}

/// Frees the whole pages of `file[start..end]` (a scratch file in memory: reads of them give
/// zeros afterwards).
fn cut_out(file: &std::fs::File, start: usize, end: usize) {
    use std::os::fd::AsRawFd;
    const PAGE: usize = 4096;
    let first = start.div_ceil(PAGE) * PAGE;
    let last = end / PAGE * PAGE;
    let (Ok(offset), Ok(len)) = (
        libc::off_t::try_from(first),
        libc::off_t::try_from(last.saturating_sub(first)),
    ) else {
        return;
    };
    if len == 0 {
        return;
    }
    // SAFETY: a plain system call on a file descriptor this process holds open; it changes
    // the file's contents (to zeros), never this process's memory mappings' validity.
    let _ = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    };
}

impl Drop for Workers<'_> {
    fn drop(&mut self) {
        self.shared.cancelled.store(true, Ordering::Relaxed);
        self.shared.moved.notify_all();
        self.shared.bases.wake_all();
    }
}

impl<'scope, 'env> Splicer<'scope, 'env> {
    /// Regions of `chunks` (the first chunk is decoded by the main thread: it holds the top of
    /// the file, where the keys of trace entries are first written).
    pub(crate) fn new(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        bytes: Landed<'env>,
        plan: ChunkPlan<'env>,
        threads: usize,
        limits: Limits,
    ) -> Self {
        Self {
            scope,
            bytes,
            plan: Arc::new(plan),
            exhausted: false,
            threads: threads.max(1),
            limits,
            next: 1,
            pending: None,
            workers: None,
            map: None,
            scratch: None,
            waited: std::time::Duration::ZERO,
            splicing: std::time::Duration::ZERO,
            splicing_cpu: std::time::Duration::ZERO,
            tally: Tally::default(),
        }
    }

    /// Hands the pages of `map` (which `data` is) back to the kernel once every thread has
    /// read past them, so a large file does not stay resident as it is decoded.
    pub(crate) fn releasing(mut self, mapped: MappedFile<'env>) -> Self {
        let room = self.bytes.upto(0);
        if std::ptr::eq(mapped.map.as_ptr(), room.as_ptr()) && mapped.map.len() == self.bytes.room()
        {
            self.map = Some(mapped.map);
            self.scratch = mapped.scratch.then_some(mapped.file);
        }
        self
    }

    /// Tells the workers that the main thread reads on from `at`: the map's pages before it
    /// may be handed back.
    fn passed(&self, at: u64) {
        if let Some(pages) = self.workers.as_ref().and_then(|w| w.shared.pages.as_ref()) {
            let at = usize::try_from(at).unwrap_or(usize::MAX);
            pages.passed.fetch_max(at, Ordering::Relaxed);
        }
    }

    pub(crate) fn splice_at(&self) -> u64 {
        match &self.pending {
            Some(region) => region.start,
            None => self.next_start().map_or(u64::MAX, |start| start as u64),
        }
    }

    /// Where the next chunk to splice starts, if there is one.
    fn next_start(&self) -> Option<usize> {
        if self.exhausted {
            return None;
        }
        self.plan.start(self.next)
    }

    /// Chunks the decode was cut into (so far).
    pub(crate) fn planned(&self) -> usize {
        self.plan.planned()
    }

    /// Starts the workers once the memo holds the key "action" (decoded by the main thread in
    /// the first chunks), telling them every memo string so far.
    fn start(&mut self, heap: &Heap, memo: &Memo) -> bool {
        let known: Vec<Option<Arc<str>>> = (0..memo.next_index())
            .map(|index| memo.get(index).and_then(|value| heap.arc_str(value)))
            .collect();
        if !known.iter().flatten().any(|text| &**text == "action") {
            return false;
        }
        let known: KnownStrings = Arc::new(known);
        // The puts before the first chunk a worker takes, which the main thread decoded (a
        // chunk or two at the top of the file).
        let Some(first_base) = self
            .next_start()
            .and_then(|start| count_memo_puts(self.bytes.upto(start), 2, start))
        else {
            // Not countable (an opcode only the sequential decoder reads): no chunk will be,
            // so the main thread decodes the rest without asking again.
            self.exhausted = true;
            return false;
        };
        let (sender, results) = channel();
        let shared = Arc::new(WorkShared {
            next_chunk: AtomicUsize::new(self.next),
            taken: Mutex::new(self.next),
            moved: Condvar::new(),
            cancelled: AtomicBool::new(false),
            // One chunk in hand per worker and two done, waiting: enough to keep every worker
            // busy while the main thread splices, and no more (each region waiting holds its
            // decoded rows and its file pages; twice as many cost 16 threads ~70 MB more).
            ahead: self.threads + 2,
            bases: MemoBases::new(self.next, first_base),
            decoding_ns: AtomicU64::new(0),
            decoding_cpu_ns: AtomicU64::new(0),
            held_back_ns: AtomicU64::new(0),
            awaiting_bases_ns: AtomicU64::new(0),
            pages: self.map.map(|map| PageRelease {
                map,
                scratch: self.scratch,
                landing: self.bytes.tracker(),
                passed: AtomicUsize::new(0),
                released: Mutex::new(0),
            }),
        });
        for _ in 0..self.threads {
            let (shared, sender, known, plan) = (
                shared.clone(),
                sender.clone(),
                known.clone(),
                self.plan.clone(),
            );
            let (bytes, limits) = (self.bytes, self.limits);
            let spawned = std::thread::Builder::new()
                .name("snapview-decode".into())
                .spawn_scoped(self.scope, move || {
                    work(&shared, &sender, bytes, &plan, &known, &limits);
                });
            if spawned.is_err() {
                break;
            }
        }
        self.workers = Some(Workers {
            results,
            received: BTreeMap::new(),
            shared,
        });
        // (Its time beside the first and last lines of the read tells how long the main
        // thread decoded alone.)
        tracing::debug!(first_chunk = self.next, "workers started");
        true
    }

    /// The region of chunk `next`, waiting for it (`None`: the chunk has none, or the workers
    /// are gone).
    fn receive(&mut self) -> Option<Region> {
        let index = self.next;
        self.next += 1;
        let workers = self.workers.as_mut()?;
        if let Ok(mut taken) = workers.shared.taken.lock() {
            *taken = index + 1;
        }
        workers.shared.moved.notify_all();
        let started = std::time::Instant::now();
        let region = loop {
            if let Some(region) = workers.received.remove(&index) {
                break region;
            }
            match workers.results.recv() {
                Ok((at, region)) => {
                    workers.received.insert(at, region);
                }
                Err(_) => break None,
            }
        };
        self.waited += started.elapsed();
        region
    }

    /// Offers the region starting at `at`, if there is one and it holds.
    pub(crate) fn splice<F: TraceFollower>(
        &mut self,
        compactor: &mut TraceCompactor<'_, F>,
        heap: &mut Heap,
        memo: &mut Memo,
        at: u64,
        state: MachineState<'_>,
    ) -> Result<Option<Splice>, PickleError> {
        self.passed(at);
        loop {
            if self.pending.is_none() {
                let Some(start) = self.next_start() else {
                    return Ok(None);
                };
                if start as u64 > at {
                    return Ok(None);
                }
                if self.workers.is_none() && !self.start(heap, memo) {
                    // Not yet: the main thread decodes this chunk too.
                    self.next += 1;
                    continue;
                }
                self.pending = self.receive();
                continue;
            }
            let start = self
                .pending
                .as_ref()
                .map_or(u64::MAX, |region| region.start);
            if start > at {
                return Ok(None);
            }
            let Some(region) = self.pending.take() else {
                return Ok(None);
            };
            if start < at {
                // The machine is past it (a region the previous one overlapped).
                continue;
            }
            let started = std::time::Instant::now();
            let cpu_started = thread_cpu();
            self.tally.regions += 1;
            self.tally.puts += region.memo.len() as u64;
            self.tally.strings += region.strings.len() as u64;
            self.tally.frames += region.frames.len() as u64;
            self.tally.stacks += region.stacks.len() as u64;
            self.tally.rows += region.rows.len() as u64;
            let spliced = compactor.splice_region(heap, memo, region, state);
            self.splicing += started.elapsed();
            self.splicing_cpu += thread_cpu().saturating_sub(cpu_started);
            return spliced;
        }
    }
}

/// A worker thread: takes chunks in order, at most `ahead` beyond the main thread.
fn work(
    shared: &WorkShared<'_>,
    sender: &Sender<(usize, Option<Region>)>,
    bytes: Landed<'_>,
    plan: &ChunkPlan<'_>,
    known: &KnownStrings,
    limits: &Limits,
) {
    loop {
        let index = shared.next_chunk.fetch_add(1, Ordering::Relaxed);
        let held_back = std::time::Instant::now();
        let Ok(mut taken) = shared.taken.lock() else {
            return;
        };
        while index > *taken + shared.ahead && !shared.cancelled.load(Ordering::Relaxed) {
            taken = match shared.moved.wait(taken) {
                Ok(taken) => taken,
                Err(_) => return,
            };
        }
        drop(taken);
        add_elapsed(&shared.held_back_ns, held_back);
        if shared.cancelled.load(Ordering::Relaxed) {
            return;
        }
        let Some(chunk) = plan.chunk(index) else {
            return;
        };
        // The chunk's bytes and a little past its end, where its last entry ends (an entry is
        // a few hundred bytes; one that runs further ends the region before it, and the main
        // thread decodes it).
        let data = bytes.upto(chunk.end.saturating_add(LOOK_PAST_CHUNK));
        // The last chunk's count is no chunk's base: that it may end in STOP and trailing
        // bytes (and so count as uncountable) harms no one.
        let counting = std::time::Instant::now();
        shared
            .bases
            .count(index, count_memo_puts(data, chunk.start, chunk.end));
        add_elapsed(&shared.decoding_ns, counting);
        let awaiting = std::time::Instant::now();
        let base = shared.bases.wait_for(index, &shared.cancelled);
        add_elapsed(&shared.awaiting_bases_ns, awaiting);
        let decoding = std::time::Instant::now();
        let cpu_started = thread_cpu();
        let region =
            base.and_then(|memo_base| decode_region(data, chunk, memo_base, known, limits));
        add_elapsed(&shared.decoding_ns, decoding);
        let cpu = thread_cpu().saturating_sub(cpu_started).as_nanos();
        let cpu = u64::try_from(cpu).unwrap_or(u64::MAX);
        shared.decoding_cpu_ns.fetch_add(cpu, Ordering::Relaxed);
        if sender.send((index, region)).is_err() {
            return;
        }
        if let Some(pages) = &shared.pages {
            pages.release();
        }
    }
}

/// The CPU time this thread has run (zero where the clock cannot be read).
fn thread_cpu() -> std::time::Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to write; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Adds the time since `since` to `counter` (nanoseconds).
fn add_elapsed(counter: &AtomicU64, since: std::time::Instant) {
    let elapsed = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    counter.fetch_add(elapsed, Ordering::Relaxed);
}

/// Bytes past a chunk's end that its worker waits for as well, while the pickle is landing.
const LOOK_PAST_CHUNK: usize = 256 << 10;

/// The snapshot compactor with a [`Splicer`]: decodes as the compactor does, and splices in the
/// regions the workers decoded.
pub(crate) struct Splicing<'c, 'scope, 'env, F> {
    pub(crate) compactor: &'c mut TraceCompactor<'scope, F>,
    pub(crate) splicer: Splicer<'scope, 'env>,
    pub(crate) progress: Option<&'c (dyn Fn(u64) + Sync)>,
}

impl<F: TraceFollower> crate::pickle::Compactor for Splicing<'_, '_, '_, F> {
    fn compact(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        dict: Value,
        items: &[Value],
    ) -> Result<Option<Value>, PickleError> {
        self.compactor.compact(heap, memo, dict, items)
    }

    fn compact_flat(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        items: &[Value],
    ) -> Result<Option<Value>, PickleError> {
        self.compactor.compact_flat(heap, memo, items)
    }

    fn append(
        &mut self,
        heap: &mut Heap,
        list: Value,
        items: &[Value],
    ) -> Result<bool, PickleError> {
        self.compactor.append(heap, list, items)
    }

    fn splice_at(&self) -> u64 {
        self.splicer.splice_at()
    }

    fn splice(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        at: u64,
        state: MachineState<'_>,
    ) -> Result<Option<Splice>, PickleError> {
        if let Some(progress) = self.progress {
            progress(at);
        }
        self.splicer.splice(self.compactor, heap, memo, at, state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bases follow the counts in whatever order the workers finish them, stop at a chunk that
    /// cannot be counted, and a wait ends when the decode is cancelled.
    #[test]
    fn memo_bases_are_the_running_sum_of_counts_in_any_order() {
        let not_cancelled = AtomicBool::new(false);
        let bases = MemoBases::new(1, 10);
        bases.count(3, Some(7));
        bases.count(2, Some(5));
        assert_eq!(bases.wait_for(1, &not_cancelled), Some(10));
        bases.count(1, Some(3));
        assert_eq!(bases.wait_for(2, &not_cancelled), Some(13));
        assert_eq!(bases.wait_for(3, &not_cancelled), Some(18));
        assert_eq!(bases.wait_for(4, &not_cancelled), Some(25));

        let broken = MemoBases::new(0, 0);
        broken.count(0, Some(2));
        broken.count(1, None);
        broken.count(2, Some(1));
        assert_eq!(broken.wait_for(1, &not_cancelled), Some(2));
        assert_eq!(broken.wait_for(2, &not_cancelled), None);
        assert_eq!(broken.wait_for(3, &not_cancelled), None);

        let overflowing = MemoBases::new(0, u32::MAX - 1);
        overflowing.count(0, Some(2));
        assert_eq!(overflowing.wait_for(1, &not_cancelled), None);

        // A worker waiting on a count that never comes is freed by cancelling.
        let waiting = Arc::new(MemoBases::new(0, 0));
        let cancelled = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (waiting, cancelled) = (waiting.clone(), cancelled.clone());
            std::thread::spawn(move || waiting.wait_for(2, &cancelled))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        cancelled.store(true, Ordering::Relaxed);
        waiting.wake_all();
        assert_eq!(waiter.join().unwrap(), None);
    }

    /// A region's puts, laid out in whole blocks where they fill them, set the memo exactly as
    /// the same puts set one by one: from any base (inside the hot entries, inside a block, at
    /// a block), with rows that count up, runs broken and rows out of order.
    #[test]
    fn a_regions_puts_in_blocks_set_the_memo_as_one_by_one() {
        let value_of = |out: &MemoOut| match *out {
            MemoOut::Str(text) => Value::of(Kind::Str, text as usize),
            MemoOut::Frame(local) => Value::record(FRAME_RECORD | u64::from(local)),
            MemoOut::Stack(local) => Value::record(STACK_RECORD | u64::from(local)),
            MemoOut::Entry(row) => Value::record(EVENT_RECORD | (1000 + u64::from(row))),
        };
        let hot = Memo::HOT as u32;
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut random = move |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(n)) as u32
        };
        for base in [
            0,
            hot - 200,
            hot - 1,
            hot,
            hot + 1,
            hot + 63,
            hot + 64,
            hot + 4000,
        ] {
            for len in [0, 1, 63, 64, 200, 3000] {
                let mut row = 0;
                let puts: Vec<MemoOut> = (0..len)
                    .map(|_| match random(10) {
                        0..=4 => {
                            row += 1;
                            MemoOut::Entry(row)
                        }
                        5 => MemoOut::Entry(random(50)),
                        6 | 7 => MemoOut::Stack(random(1 << 20)),
                        8 => MemoOut::Frame(random(100)),
                        _ => MemoOut::Str(random(10)),
                    })
                    .collect();
                let mut one_by_one = Memo::default();
                let mut in_blocks = Memo::default();
                for memo in [&mut one_by_one, &mut in_blocks] {
                    memo.extend((0..base).map(|i| Value::of(Kind::Str, i as usize)));
                }
                let laid_out = RegionMemo::of(base, &puts);
                assert_eq!(laid_out.len(), puts.len(), "base {base}, {len} puts");
                if base >= hot && len >= 200 {
                    assert!(!laid_out.blocks.is_empty(), "base {base}, {len} puts");
                }
                one_by_one.extend(puts.iter().map(value_of));
                laid_out.set_in(&mut in_blocks, value_of);
                assert_eq!(in_blocks.next_index(), one_by_one.next_index());
                for index in 0..one_by_one.next_index() + 2 {
                    assert_eq!(
                        in_blocks.get(index),
                        one_by_one.get(index),
                        "base {base}, {len} puts: index {index}"
                    );
                }
            }
        }
    }
}
