//! The opcode loop.
//!
//! One file on purpose: this is the hot loop of every load. `Machine::run` is one `match` over
//! the opcodes, and the helpers around it (stack, mark and memo access, the string and
//! `SETITEMS` paths) exist only for it, the frequent ones marked to be inlined into it; split,
//! each piece would be read only next to the match. One path besides it: `flat_items`, the
//! opcodes of a flat dict (every trace entry) in a loop of their own, the dict stored only if
//! the compactor does not take it first, tested against the loop alone (`tests/parallel.rs`).
//! The [`Compactor`] trait stays beside the loop that calls it, since when it is called (right
//! after a `SETITEMS` or before an `APPEND`) is its contract.

use super::input::{Chunks, InMemory, Landed, Source, Supply};
use super::value::{Heap, Kind, Memo, Value};
use super::{Limits, PickleError};
use std::io::Read;

/// Replaces records with compact handles the moment they are complete.
///
/// A flat dict (every trace entry) is offered to [`Compactor::compact_flat`] first, before it
/// is stored at all. Otherwise `compact` is called for each dict right after a SETITEMS fills
/// it (CPython's pickler writes a dict's items in one SETITEMS unless it has over 1000 keys; a
/// trace entry or a frame has under 20).
/// `items` holds the dict's keys and values alternately (`k0, v0, k1, v1, ...`); for a dict that
/// was empty before this SETITEMS they are read straight from the machine's stack, and the dict
/// itself is filled only if the compactor declines or the dict is shared.
/// Returning `Some(handle)` retires the dict: the memo entry that named it yields the handle from
/// then on, and its slot is reused unless it is shared (then other references stay valid).
/// Compacting this early matters: lists inside the dict (a trace entry's frames) are retired
/// before any later entry can fetch them from the memo, so they can be freed.
///
/// Either call may stop decoding by returning [`PickleError::Stopped`] (a limit the compactor
/// keeps, such as how many records a file may hold); the compactor says why.
pub trait Compactor {
    fn compact(
        &mut self,
        heap: &mut Heap,
        memo: &mut Memo,
        dict: Value,
        items: &[Value],
    ) -> Result<Option<Value>, PickleError>;

    /// Offered a flat dict (`EMPTY_DICT MEMOIZE MARK (key value [MEMOIZE])* SETITEMS`, every
    /// trace entry) at its SETITEMS before the dict is stored: `items` as for
    /// [`Compactor::compact`], and nothing else refers to the dict (its one memo entry was not
    /// fetched). Returning `Some(handle)` takes it as `compact` would take it and retire it,
    /// without the dict ever being stored. `None` has it stored and offered to `compact` as
    /// usual, so declining must change nothing `compact` would see (a cache it fills is fine).
    fn compact_flat(
        &mut self,
        _heap: &mut Heap,
        _memo: &mut Memo,
        _items: &[Value],
    ) -> Result<Option<Value>, PickleError> {
        Ok(None)
    }

    /// Offered the items of each APPEND(S) to `list` before they are stored; returning true
    /// takes them, and the list does not store them. A compactor that takes items keeps what
    /// they were (a trace's list of millions of records need not be stored to be read back),
    /// and must put them back into the list (with [`Heap::list_push`]) before it declines a
    /// later append to the same list, so the list's items stay in order.
    fn append(
        &mut self,
        _heap: &mut Heap,
        _list: Value,
        _items: &[Value],
    ) -> Result<bool, PickleError> {
        Ok(false)
    }

    /// The stream offset at which [`Compactor::splice`] is next asked (`u64::MAX`: never).
    /// Checked before every opcode, so it must be cheap.
    fn splice_at(&self) -> u64 {
        u64::MAX
    }

    /// Asked at offset `at` (once the machine reaches [`Compactor::splice_at`]): whether the
    /// opcodes from `at` on were already decoded elsewhere (on another core). A [`Splice`]
    /// returned says where they end and what they leave to do on the machine's stack, which
    /// the machine then does exactly as the opcodes would. `stack` and `marks` are the
    /// machine's, for the compactor to check that what it offers holds from this state.
    fn splice(
        &mut self,
        _heap: &mut Heap,
        _memo: &mut Memo,
        _at: u64,
        _state: MachineState<'_>,
    ) -> Result<Option<Splice>, PickleError> {
        Ok(None)
    }
}

/// What the machine holds when a [`Compactor::splice`] is offered.
#[derive(Debug, Clone, Copy)]
pub struct MachineState<'a> {
    pub stack: &'a [Value],
    /// Stack lengths at each open MARK.
    pub marks: &'a [usize],
    pub max_depth: usize,
}

/// Opcodes decoded elsewhere, as what they leave to do on the machine's stack.
#[derive(Debug)]
pub struct Splice {
    /// The stream offset just after them.
    pub end: u64,
    pub ops: Vec<SpliceOp>,
}

/// One step a spliced region leaves to the machine: the top-level opcodes between its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpliceOp {
    /// `count` finished values pushed: the records of handles `first..first + count` (the
    /// entries of a region, one row after another).
    Records { first: u64, count: u32 },
    /// MARK
    Mark,
    /// APPENDS
    Appends,
    /// APPEND
    Append,
}

/// A compactor that keeps everything as decoded.
impl Compactor for () {
    fn compact(
        &mut self,
        _: &mut Heap,
        _: &mut Memo,
        _: Value,
        _: &[Value],
    ) -> Result<Option<Value>, PickleError> {
        Ok(None)
    }
}

/// The result of decoding one pickle.
#[derive(Debug)]
pub struct Decoded {
    pub root: Value,
    pub heap: Heap,
    pub protocol: u8,
    /// Bytes of pickle decoded, up to and including STOP (after decompression).
    pub bytes: u64,
}

/// Opcodes that would import or call code, by byte.
fn code_opcode(opcode: u8) -> Option<&'static str> {
    Some(match opcode {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        _ => return None,
    })
}

/// What ended [`Machine::flat_pairs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlatEnd {
    SetItems,
    Appends,
    /// Anything else: the loop takes over.
    Elsewhere,
}

/// The memo index a BINGET or LONG_BINGET at `bytes[at]` names, and the opcode's length;
/// `None` when its argument is cut off.
#[inline(always)]
fn memo_reference(bytes: &[u8], at: usize) -> Option<(u32, usize)> {
    match bytes.get(at) {
        Some(b'h') => bytes.get(at + 1).map(|&index| (u32::from(index), 2)),
        Some(b'j') => bytes
            .get(at + 1..at + 5)
            .map(|b| (u32::from_le_bytes([b[0], b[1], b[2], b[3]]), 5)),
        _ => None,
    }
}

/// Memo entry `index` as [`Machine::flat_pairs`] fetches it: `None` (which stops it) for one
/// the memo does not have, or for the `deferred` dict's, which is not stored yet.
#[inline(always)]
fn flat_fetch(memo: &Memo, deferred: u32, index: u32) -> Option<Value> {
    if index == deferred {
        return None;
    }
    memo.get(index)
}

/// The short string decoded last, its text also as one word, so that the next one is compared
/// in a load and a mask rather than by a call to `memcmp` (three bytes, once per entry).
struct ShortString {
    text: Vec<u8>,
    /// `text` zero-padded to 16 bytes, little-endian.
    word: u128,
    value: Value,
}

impl ShortString {
    /// The longest text remembered.
    const MAX: usize = 16;

    fn new(text: &[u8], value: Value) -> Self {
        let mut padded = [0u8; 16];
        padded[..text.len()].copy_from_slice(text);
        Self {
            text: text.to_vec(),
            word: u128::from_le_bytes(padded),
            value,
        }
    }

    /// Whether `text`, which starts at `bytes[at..]`, is this string's text.
    #[inline(always)]
    fn matches(&self, bytes: &[u8], at: usize, text: &[u8]) -> bool {
        let n = text.len();
        if n != self.text.len() {
            return false;
        }
        match bytes.get(at..at + 16) {
            Some(window) => {
                let word = u128::from_le_bytes(window.try_into().unwrap_or([0; 16]));
                // n <= 16 here (the text's length is this string's).
                let mask = u128::MAX.checked_shr(128 - 8 * n as u32).unwrap_or(0);
                word & mask == self.word
            }
            None => self.text == text,
        }
    }
}

struct Machine<'c, S> {
    input: Source<S>,
    heap: Heap,
    memo: Memo,
    stack: Vec<Value>,
    /// Stack lengths at each open MARK.
    marks: Vec<usize>,
    limits: Limits,
    compactor: &'c mut dyn Compactor,
    /// Offset of the opcode being executed, for messages.
    at: u64,
    last_short_string: Option<ShortString>,
    /// The compactor's [`Compactor::splice_at`], cached.
    splice_at: u64,
    /// The memo index of the flat dict [`Machine::flat_items`] has not stored yet (a
    /// placeholder holds its place on the stack and in the memo), or [`NOT_DEFERRED`].
    deferred: u32,
}

/// No dict is deferred.
const NOT_DEFERRED: u32 = u32::MAX;

/// Decodes one pickle from `reader`. Never runs code: opcodes that would are refused.
pub fn decode<R: Read>(
    reader: R,
    limits: &Limits,
    compactor: &mut dyn Compactor,
) -> Result<Decoded, PickleError> {
    decode_from(Source::new(reader), limits, compactor)
}

/// Decodes one pickle from whole buffers (see [`Chunks`]), reading each where it is.
pub fn decode_chunks<C: Chunks>(
    chunks: C,
    limits: &Limits,
    compactor: &mut dyn Compactor,
) -> Result<Decoded, PickleError> {
    decode_from(Source::chunked(chunks), limits, compactor)
}

/// Decodes one pickle held in memory, whole or still landing (then each read waits for its
/// bytes); the compactor may splice in regions of it that were decoded on other cores (see
/// [`Compactor::splice`]).
pub fn decode_in_memory(
    bytes: Landed<'_>,
    limits: &Limits,
    compactor: &mut dyn Compactor,
) -> Result<Decoded, PickleError> {
    decode_from(Source::<InMemory<'_>>::in_memory(bytes), limits, compactor)
}

fn decode_from<S: Supply>(
    input: Source<S>,
    limits: &Limits,
    compactor: &mut dyn Compactor,
) -> Result<Decoded, PickleError> {
    let mut machine = Machine {
        input,
        heap: Heap::default(),
        memo: Memo::default(),
        stack: Vec::with_capacity(1024),
        marks: Vec::new(),
        limits: *limits,
        compactor,
        at: 0,
        last_short_string: None,
        splice_at: u64::MAX,
        deferred: NOT_DEFERRED,
    };
    machine.splice_at = machine.compactor.splice_at();
    if machine.input.byte("the PROTO opcode")? != 0x80 {
        return Err(PickleError::NotASnapshot(
            "not a pickle of protocol 2 or later (no PROTO opcode at byte 0)".into(),
        ));
    }
    let protocol = machine.input.byte("the PROTO opcode")?;
    let root = machine.run()?;
    Ok(Decoded {
        root,
        bytes: machine.input.offset(),
        heap: machine.heap,
        protocol,
    })
}

impl<S: Supply> Machine<'_, S> {
    fn error(&self, message: impl Into<String>) -> PickleError {
        PickleError::malformed(self.at, message)
    }

    #[inline]
    fn pop(&mut self, what: &str) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.error(format!("{what} found an empty stack")));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.error(format!("{what} found an empty stack")))
    }

    #[inline]
    fn top(&self, what: &str) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match self.stack.last() {
            Some(&v) if self.stack.len() > floor => Ok(v),
            _ => Err(self.error(format!("{what} found an empty stack"))),
        }
    }

    /// The container just below a MARK that was opened at stack length `from`.
    fn below_mark(&self, from: usize, what: &str) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match from.checked_sub(1) {
            Some(i) if i >= floor => Ok(self.stack[i]),
            _ => Err(self.error(format!("{what} has no container below its MARK"))),
        }
    }

    fn pop_mark(&mut self, what: &str) -> Result<usize, PickleError> {
        self.marks
            .pop()
            .ok_or_else(|| self.error(format!("{what} without a MARK")))
    }

    // The memo opcodes are the most frequent ones; inlined into the loop they cost no call
    // (measured: 15% less time on the decoding thread), and their error messages are built out
    // of line.
    #[inline(always)]
    fn memo_put(&mut self, index: u32) -> Result<(), PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match self.stack.last() {
            Some(&value) if self.stack.len() > floor => {
                self.heap.note_memo(value, index);
                self.memo.set(index, value);
                Ok(())
            }
            _ => Err(self.empty_stack("a memo PUT")),
        }
    }

    #[inline(always)]
    fn memo_get(&mut self, index: u32) -> Result<(), PickleError> {
        match self.memo.get(index) {
            Some(value) => {
                self.heap.note_shared(value);
                self.stack.push(value);
                Ok(())
            }
            None => Err(self.missing_memo(index)),
        }
    }

    #[cold]
    #[inline(never)]
    /// The memo index of a text `PUT` or `GET` (protocol 0): a decimal number on its own line.
    fn line_index(&mut self, what: &'static str) -> Result<u32, PickleError> {
        let line = self.input.take_line(what)?;
        std::str::from_utf8(&line)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .ok_or_else(|| self.error(format!("{what} with a bad index")))
    }

    fn missing_memo(&self, index: u32) -> PickleError {
        self.error(format!(
            "memo reference to index {index}, which was never stored"
        ))
    }

    #[cold]
    #[inline(never)]
    fn empty_stack(&self, what: &str) -> PickleError {
        self.error(format!("{what} found an empty stack"))
    }

    fn string(&mut self, bytes: &[u8]) -> Value {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.heap.intern_str(text),
            // CPython writes lone surrogates with 'surrogatepass'; keep the text readable.
            Err(_) => {
                let text = String::from_utf8_lossy(bytes).into_owned();
                self.heap.intern_str(&text)
            }
        }
    }

    fn short_string(&mut self, len: usize, what: &'static str) -> Result<(), PickleError> {
        let bytes = self.input.take(len, what)?;
        // Most short strings written per trace entry repeat the previous one ("N/A").
        if let Some(last) = &self.last_short_string
            && last.text == bytes
        {
            self.stack.push(last.value);
            return Ok(());
        }
        let value = match std::str::from_utf8(bytes) {
            Ok(text) => self.heap.intern_str(text),
            Err(_) => {
                let owned = bytes.to_vec();
                self.string(&owned)
            }
        };
        if len <= ShortString::MAX {
            self.last_short_string = Some(ShortString::new(self.input.last(len), value));
        }
        self.stack.push(value);
        Ok(())
    }

    /// Reads a length-prefixed payload of `len` bytes, refusing a length no snapshot needs
    /// before reading or allocating anything for it.
    fn payload(&mut self, len: u64, what: &'static str) -> Result<Vec<u8>, PickleError> {
        if len > self.limits.max_string_bytes {
            return Err(PickleError::StringTooLong {
                offset: self.input.offset(),
                what,
                declared: len,
                limit: self.limits.max_string_bytes,
            });
        }
        self.input.take_vec(len, what)
    }

    fn long_string(&mut self, len: u64, what: &'static str) -> Result<(), PickleError> {
        let bytes = self.payload(len, what)?;
        let value = self.string(&bytes);
        self.stack.push(value);
        Ok(())
    }

    fn list_target(&self, what: &str, list: Value) -> Result<usize, PickleError> {
        match list.kind() {
            Kind::List => Ok(list.index()),
            other => Err(self.error(format!("{what} on a {other:?}, not a list"))),
        }
    }

    /// Moves `stack[from..]` into `list` (or to the compactor, if it takes them).
    fn append_from(&mut self, list: Value, from: usize, what: &str) -> Result<(), PickleError> {
        let slot = self.list_target(what, list)?;
        if self
            .compactor
            .append(&mut self.heap, list, &self.stack[from..])?
        {
            self.stack.truncate(from);
            return Ok(());
        }
        let items = self.stack.drain(from..);
        if let Some(target) = self.heap.lists.get_mut(slot) {
            target.extend(items);
        }
        Ok(())
    }

    /// SETITEM(S)/DICT: sets `stack[from..]` (keys and values alternately) in `dict`, which is at
    /// `stack[from - 1]`; with `compact` (SETITEMS and DICT, not SETITEM) offers the dict to the
    /// compactor, which may replace it there by its handle.
    fn set_items_from(
        &mut self,
        dict: Value,
        from: usize,
        what: &str,
        compact: bool,
    ) -> Result<(), PickleError> {
        if dict.is(Kind::Record) {
            return Err(self.error(format!(
                "{what} adds keys to a record that was already complete (an unusual pickle layout snapview does not read)"
            )));
        }
        if !dict.is(Kind::Dict) {
            return Err(self.error(format!("{what} on a {:?}, not a dict", dict.kind())));
        }
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(self.error(format!("{what} with an odd number of keys and values")));
        }
        let slot = dict.index();
        if !compact {
            self.fill(slot, from);
            self.stack.truncate(from);
            return Ok(());
        }
        if self.heap.dicts.get(slot).is_empty() {
            // The usual case: a fresh dict filled by one SETITEMS. The compactor reads the pairs
            // where they are, so a dict it takes is never filled (one copy less per record).
            let handle = self.compactor.compact(
                &mut self.heap,
                &mut self.memo,
                dict,
                &self.stack[from..],
            )?;
            if let Some(handle) = handle {
                if !self.heap.can_retire(dict) {
                    // Shared: other references may still read the dict, so it gets its pairs.
                    self.fill(slot, from);
                }
                self.heap.retire(dict, handle, &mut self.memo);
                self.stack.truncate(from);
                self.stack[from - 1] = handle;
                return Ok(());
            }
            self.fill(slot, from);
            self.stack.truncate(from);
            return Ok(());
        }
        // A dict that already had keys (over 1000 keys take several SETITEMS): offer all of them.
        self.fill(slot, from);
        self.stack.truncate(from);
        let items: Vec<Value> = self
            .heap
            .dicts
            .get(slot)
            .iter()
            .flat_map(|&(k, v)| [k, v])
            .collect();
        if let Some(handle) =
            self.compactor
                .compact(&mut self.heap, &mut self.memo, dict, &items)?
        {
            self.heap.retire(dict, handle, &mut self.memo);
            self.stack[from - 1] = handle;
        }
        Ok(())
    }

    /// Copies `stack[from..]` (keys and values alternately) into dict `slot`.
    fn fill(&mut self, slot: usize, from: usize) {
        let pairs = self.stack[from..]
            .chunks_exact(2)
            .map(|pair| (pair[0], pair[1]));
        if let Some(target) = self.heap.dicts.get_mut(slot) {
            target.extend(pairs);
        }
    }

    /// Offers the compactor the opcodes from here on, and does what a splice leaves to do.
    #[cold]
    #[inline(never)]
    fn splice(&mut self) -> Result<(), PickleError> {
        let state = MachineState {
            stack: &self.stack,
            marks: &self.marks,
            max_depth: self.limits.max_depth,
        };
        let offered = self
            .compactor
            .splice(&mut self.heap, &mut self.memo, self.at, state)?;
        if let Some(splice) = offered {
            for op in splice.ops {
                match op {
                    SpliceOp::Records { first, count } => self
                        .stack
                        .extend((first..first + u64::from(count)).map(Value::record)),
                    SpliceOp::Mark => self.mark()?,
                    SpliceOp::Appends => self.appends()?,
                    SpliceOp::Append => self.append()?,
                }
            }
            self.input.skip_to(splice.end)?;
        }
        self.splice_at = self.compactor.splice_at();
        Ok(())
    }

    /// EMPTY_DICT, and the opcodes a flat dict is written with after it, `MEMOIZE MARK (key
    /// value [MEMOIZE])* SETITEMS` (every trace entry), with keys fetched from the memo and
    /// values that are memo fetches, integers, a repeated short string or a list (empty, or
    /// memo fetches up to its APPENDS: an entry's frames). Each opcode is done exactly as the
    /// loop in [`Machine::run`] does it, from the buffered bytes and without its per-opcode
    /// bookkeeping, and in a loop of its own whose branches follow the key-value rhythm (the
    /// loop's one dispatch for every opcode mispredicts often). It stops before anything else
    /// (another opcode, one cut off by the buffer's end, one that would fail, the offset a
    /// splice is asked at) and the loop goes on from there: nothing is decoded differently,
    /// only in fewer steps.
    ///
    /// The dict itself is stored only when something needs it: the loop stopping before its
    /// SETITEMS, or the compactor declining it there ([`Compactor::compact_flat`]). Until then
    /// a placeholder holds its place on the stack and in the memo, and a fetch of its memo
    /// entry stops the loop (which stores it first). A trace entry is taken at its SETITEMS,
    /// so its dict is never stored, filled or retired.
    #[inline(always)]
    fn flat_items(&mut self) -> Result<(), PickleError> {
        // The dict's MEMOIZE (the dict is above any MARK) and its MARK.
        let room = self.splice_at.saturating_sub(self.input.offset());
        let prologue = room >= 2 && self.input.buffered().get(..2) == Some(&[0x94, b'(']);
        if !prologue || self.marks.len() >= self.limits.max_depth {
            let dict = self.heap.new_dict();
            self.stack.push(dict);
            return Ok(());
        }
        let index = self.memo.next_index();
        let at = self.stack.len();
        self.stack.push(Value::NONE);
        self.memo.set(index, Value::NONE);
        self.deferred = index;
        self.marks.push(self.stack.len());
        self.input.consume(2);
        let done = self.flat_entries(at, index);
        if self.deferred != NOT_DEFERRED {
            self.store_deferred(at, index);
        }
        done
    }

    /// The loop of [`Machine::flat_items`] for the dict deferred at `stack[at]`, memo `index`.
    #[inline(always)]
    fn flat_entries(&mut self, at: usize, index: u32) -> Result<(), PickleError> {
        loop {
            let end = self.flat_pairs();
            if end == FlatEnd::Elsewhere {
                return Ok(());
            }
            // The SETITEMS or APPENDS, as the loop does it (its checks and messages included).
            self.at = self.input.offset();
            self.input.consume(1);
            if end == FlatEnd::SetItems {
                let from = self.pop_mark("SETITEMS")?;
                if from == at + 1 && self.deferred == index {
                    // Keys and values alternately: the loop pushes them in pairs.
                    let taken = self.compactor.compact_flat(
                        &mut self.heap,
                        &mut self.memo,
                        &self.stack[from..],
                    )?;
                    if let Some(handle) = taken {
                        // What retiring the stored dict would have left.
                        self.deferred = NOT_DEFERRED;
                        self.memo.set(index, handle);
                        self.stack.truncate(from);
                        self.stack[at] = handle;
                        return Ok(());
                    }
                    self.store_deferred(at, index);
                }
                let dict = self.below_mark(from, "SETITEMS")?;
                return self.set_items_from(dict, from, "SETITEMS", true);
            }
            self.appends()?;
        }
    }

    /// Stores the dict [`Machine::flat_items`] deferred, where its placeholder is.
    #[cold]
    fn store_deferred(&mut self, at: usize, index: u32) {
        let dict = self.heap.new_dict();
        self.heap.note_memo(dict, index);
        self.memo.set(index, dict);
        self.stack[at] = dict;
        self.deferred = NOT_DEFERRED;
    }

    /// The key-value pairs of [`Machine::flat_items`] (and a `frames` list's items: MARK and
    /// memo fetches), consumed; says what stopped them: a SETITEMS or APPENDS, not consumed,
    /// for the caller to do, or anything else.
    #[inline(always)]
    fn flat_pairs(&mut self) -> FlatEnd {
        // The bytes buffered, up to the offset a splice is next asked at.
        let room = usize::try_from(self.splice_at.saturating_sub(self.input.offset()))
            .unwrap_or(usize::MAX);
        let bytes = self.input.buffered();
        let bytes = &bytes[..bytes.len().min(room)];
        let mut i = 0;
        let mut end = FlatEnd::Elsewhere;
        loop {
            let key = match bytes.get(i) {
                Some(b'h' | b'j') => memo_reference(bytes, i),
                Some(b'u') => {
                    end = FlatEnd::SetItems;
                    None
                }
                Some(b'(') if self.marks.len() < self.limits.max_depth => {
                    // The items of a list just decoded as a value (an entry's frames): memo
                    // fetches up to their APPENDS.
                    self.marks.push(self.stack.len());
                    i += 1;
                    loop {
                        let item = match bytes.get(i) {
                            Some(b'h' | b'j') => memo_reference(bytes, i),
                            Some(b'e') => {
                                end = FlatEnd::Appends;
                                None
                            }
                            _ => None,
                        };
                        let Some((index, len)) = item else { break };
                        let Some(item) = flat_fetch(&self.memo, self.deferred, index) else {
                            break;
                        };
                        self.heap.note_shared(item);
                        self.stack.push(item);
                        i += len;
                    }
                    None
                }
                _ => None,
            };
            let Some((index, len)) = key else { break };
            let Some(key) = flat_fetch(&self.memo, self.deferred, index) else {
                break;
            };
            self.heap.note_shared(key);
            self.stack.push(key);
            i += len;
            let value = match bytes.get(i) {
                Some(b'h' | b'j') => memo_reference(bytes, i).and_then(|(index, len)| {
                    let value = flat_fetch(&self.memo, self.deferred, index)?;
                    i += len;
                    self.heap.note_shared(value);
                    Some(value)
                }),
                Some(b'K') => bytes.get(i + 1).map(|&v| {
                    i += 2;
                    Value::small_int(i64::from(v)).unwrap_or(Value::NONE)
                }),
                Some(b'M') => bytes.get(i + 1..i + 3).map(|b| {
                    i += 3;
                    Value::small_int(i64::from(u16::from_le_bytes([b[0], b[1]])))
                        .unwrap_or(Value::NONE)
                }),
                Some(b'J') => bytes.get(i + 1..i + 5).map(|b| {
                    i += 5;
                    Value::small_int(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                        .unwrap_or(Value::NONE)
                }),
                Some(0x8a) => {
                    let n = bytes.get(i + 1).map_or(usize::MAX, |&n| usize::from(n));
                    // Two per entry (its address and time): read in one load when it fits
                    // inline, with no call (the call alone was 5% of the decoding thread).
                    if let Some(value) = Heap::inline_long_at(bytes, i + 2, n) {
                        i += 2 + n;
                        Some(value)
                    } else {
                        bytes.get(i + 2..(i + 2).saturating_add(n)).map(|long| {
                            i += 2 + n;
                            self.heap.push_long(long)
                        })
                    }
                }
                Some(0x8c) => {
                    // Only the short string just decoded again ("N/A" in every entry); a new
                    // one is left to the loop, which remembers it.
                    let n = bytes.get(i + 1).map_or(usize::MAX, |&n| usize::from(n));
                    let text = bytes.get(i + 2..(i + 2).saturating_add(n));
                    match (&self.last_short_string, text) {
                        (Some(last), Some(text)) if last.matches(bytes, i + 2, text) => {
                            i += 2 + n;
                            Some(last.value)
                        }
                        _ => None,
                    }
                }
                Some(b']') => {
                    i += 1;
                    Some(self.heap.new_list())
                }
                Some(b'N') => {
                    i += 1;
                    Some(Value::NONE)
                }
                _ => None,
            };
            let Some(value) = value else { break };
            self.stack.push(value);
            if bytes.get(i) == Some(&0x94) {
                // The value is above the MARK: a put always has its value here.
                let index = self.memo.next_index();
                self.heap.note_memo(value, index);
                self.memo.set(index, value);
                i += 1;
            }
        }
        self.input.consume(i);
        end
    }

    fn mark(&mut self) -> Result<(), PickleError> {
        if self.marks.len() >= self.limits.max_depth {
            return Err(self.error(format!(
                "nesting deeper than {} levels; not a snapshot",
                self.limits.max_depth
            )));
        }
        self.marks.push(self.stack.len());
        Ok(())
    }

    fn append(&mut self) -> Result<(), PickleError> {
        let item = self.pop("APPEND")?;
        let list = self.top("APPEND")?;
        self.stack.push(item);
        let from = self.stack.len() - 1;
        self.append_from(list, from, "APPEND")
    }

    fn appends(&mut self) -> Result<(), PickleError> {
        let from = self.pop_mark("APPENDS")?;
        let list = self.below_mark(from, "APPENDS")?;
        self.append_from(list, from, "APPENDS")
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            self.at = self.input.offset();
            while self.at >= self.splice_at {
                self.splice()?;
                self.at = self.input.offset();
            }
            let Some(opcode) = self.input.next_opcode()? else {
                return Err(PickleError::Truncated {
                    offset: self.at,
                    what: "the next opcode (no STOP was reached)",
                    needed: 1,
                });
            };
            match opcode {
                // ---- framing and protocol ----
                0x95 => {
                    // FRAME: a length hint for buffered readers; the data follows inline.
                    self.input.take(8, "FRAME")?;
                }
                0x80 => {
                    self.input.byte("PROTO")?;
                }
                b'.' => {
                    // STOP
                    if !self.marks.is_empty() {
                        return Err(self.error("STOP with an unclosed MARK"));
                    }
                    return self
                        .stack
                        .pop()
                        .ok_or_else(|| self.error("STOP with an empty stack"));
                }

                // ---- constants and numbers ----
                b'N' => self.stack.push(Value::NONE),
                0x88 => self.stack.push(Value::bool(true)),
                0x89 => self.stack.push(Value::bool(false)),
                b'J' => {
                    let b = self.input.take(4, "BININT")?;
                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    self.stack
                        .push(Value::small_int(i64::from(v)).unwrap_or(Value::NONE));
                }
                b'K' => {
                    let v = self.input.byte("BININT1")?;
                    self.stack
                        .push(Value::small_int(i64::from(v)).unwrap_or(Value::NONE));
                }
                b'M' => {
                    let b = self.input.take(2, "BININT2")?;
                    let v = u16::from_le_bytes([b[0], b[1]]);
                    self.stack
                        .push(Value::small_int(i64::from(v)).unwrap_or(Value::NONE));
                }
                0x8a => {
                    let n = usize::from(self.input.byte("LONG1")?);
                    let bytes = self.input.take(n, "LONG1")?;
                    let v = self.heap.push_long(bytes);
                    self.stack.push(v);
                }
                0x8b => {
                    let n = self.input.u32_le("LONG4")?;
                    let bytes = self.payload(u64::from(n), "LONG4")?;
                    let v = self.heap.push_long(&bytes);
                    self.stack.push(v);
                }
                b'G' => {
                    let b = self.input.take(8, "BINFLOAT")?;
                    let mut buf = [0u8; 8];
                    buf.copy_from_slice(b);
                    let v = self.heap.push_float(f64::from_be_bytes(buf));
                    self.stack.push(v);
                }
                b'I' => {
                    let line = self.input.take_line("INT")?;
                    let text = String::from_utf8_lossy(&line);
                    let v = match text.trim() {
                        "00" => Value::bool(false),
                        "01" => Value::bool(true),
                        t => {
                            let n: i64 = t
                                .parse()
                                .map_err(|_| self.error(format!("INT with text {t:?}")))?;
                            Value::small_int(n)
                                .unwrap_or_else(|| self.heap.push_long(&n.to_le_bytes()))
                        }
                    };
                    self.stack.push(v);
                }
                b'L' => {
                    let line = self.input.take_line("LONG")?;
                    let text = String::from_utf8_lossy(&line);
                    let t = text.trim().trim_end_matches('L');
                    let n: i64 = t.parse().map_err(|_| {
                        self.error(format!("LONG with text {t:?} (beyond 64 bits?)"))
                    })?;
                    let v = Value::small_int(n)
                        .unwrap_or_else(|| self.heap.push_long(&n.to_le_bytes()));
                    self.stack.push(v);
                }
                b'F' => {
                    let line = self.input.take_line("FLOAT")?;
                    let text = String::from_utf8_lossy(&line);
                    let n: f64 = text
                        .trim()
                        .parse()
                        .map_err(|_| self.error(format!("FLOAT with text {text:?}")))?;
                    let v = self.heap.push_float(n);
                    self.stack.push(v);
                }

                // ---- strings and bytes ----
                0x8c => {
                    let n = usize::from(self.input.byte("SHORT_BINUNICODE")?);
                    self.short_string(n, "SHORT_BINUNICODE")?;
                }
                b'X' => {
                    let n = self.input.u32_le("BINUNICODE")?;
                    self.long_string(u64::from(n), "BINUNICODE")?;
                }
                0x8d => {
                    let n = self.input.u64_le("BINUNICODE8")?;
                    self.long_string(n, "BINUNICODE8")?;
                }
                b'U' => {
                    // SHORT_BINSTRING (Python 2 str): decoded as text, as `encoding="latin1"` would.
                    let n = usize::from(self.input.byte("SHORT_BINSTRING")?);
                    let bytes = self.input.take(n, "SHORT_BINSTRING")?;
                    let text: String = bytes.iter().map(|&b| char::from(b)).collect();
                    let v = self.heap.intern_str(&text);
                    self.stack.push(v);
                }
                b'T' => {
                    let b = self.input.take(4, "BINSTRING")?;
                    let n = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    let n = u64::try_from(n)
                        .map_err(|_| self.error("BINSTRING with a negative length"))?;
                    let bytes = self.payload(n, "BINSTRING")?;
                    let text: String = bytes.iter().map(|&b| char::from(b)).collect();
                    let v = self.heap.intern_str(&text);
                    self.stack.push(v);
                }
                b'C' => {
                    let n = usize::from(self.input.byte("SHORT_BINBYTES")?);
                    let bytes = self.input.take(n, "SHORT_BINBYTES")?.to_vec();
                    let v = self.heap.push_bytes(bytes);
                    self.stack.push(v);
                }
                b'B' => {
                    let n = self.input.u32_le("BINBYTES")?;
                    let bytes = self.payload(u64::from(n), "BINBYTES")?;
                    let v = self.heap.push_bytes(bytes);
                    self.stack.push(v);
                }
                0x8e | 0x96 => {
                    let what = if opcode == 0x8e {
                        "BINBYTES8"
                    } else {
                        "BYTEARRAY8"
                    };
                    let n = self.input.u64_le(what)?;
                    let bytes = self.payload(n, what)?;
                    let v = self.heap.push_bytes(bytes);
                    self.stack.push(v);
                }
                0x97 | 0x98 => {
                    return Err(self.error(
                        "out-of-band pickle buffers (NEXT_BUFFER/READONLY_BUFFER) are not part of a snapshot",
                    ));
                }

                // ---- containers ----
                b'(' => self.mark()?,
                b']' => {
                    let v = self.heap.new_list();
                    self.stack.push(v);
                }
                b'}' => self.flat_items()?,
                b')' => {
                    let v = self.heap.push_tuple(Vec::new());
                    self.stack.push(v);
                }
                0x8f => {
                    // EMPTY_SET: sets decode as lists.
                    let v = self.heap.new_list();
                    self.stack.push(v);
                }
                b'l' | 0x91 => {
                    // LIST / FROZENSET
                    let from = self.pop_mark("LIST")?;
                    let list = self.heap.new_list();
                    self.stack.insert(from, list);
                    self.append_from(list, from + 1, "LIST")?;
                }
                b't' => {
                    let from = self.pop_mark("TUPLE")?;
                    let items: Vec<Value> = self.stack.drain(from..).collect();
                    let v = self.heap.push_tuple(items);
                    self.stack.push(v);
                }
                0x85..=0x87 => {
                    let n = usize::from(opcode - 0x84);
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(
                            self.error(format!("TUPLE{n} with fewer than {n} items on the stack"))
                        );
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.heap.push_tuple(items);
                    self.stack.push(v);
                }
                b'd' => {
                    let from = self.pop_mark("DICT")?;
                    let dict = self.heap.new_dict();
                    self.stack.insert(from, dict);
                    self.set_items_from(dict, from + 1, "DICT", true)?;
                }
                b'a' => self.append()?,
                // APPENDS / ADDITEMS
                b'e' | 0x90 => self.appends()?,
                b's' => {
                    let value = self.pop("SETITEM")?;
                    let key = self.pop("SETITEM")?;
                    let dict = self.top("SETITEM")?;
                    self.stack.push(key);
                    self.stack.push(value);
                    let from = self.stack.len() - 2;
                    self.set_items_from(dict, from, "SETITEM", false)?;
                }
                b'u' => {
                    let from = self.pop_mark("SETITEMS")?;
                    let dict = self.below_mark(from, "SETITEMS")?;
                    self.set_items_from(dict, from, "SETITEMS", true)?;
                }

                // ---- stack ----
                b'0' => {
                    self.pop("POP")?;
                }
                b'1' => {
                    let from = self.pop_mark("POP_MARK")?;
                    self.stack.truncate(from);
                }
                b'2' => {
                    let v = self.top("DUP")?;
                    self.heap.note_shared(v);
                    self.stack.push(v);
                }

                // ---- memo ----
                0x94 => {
                    let index = self.memo.next_index();
                    self.memo_put(index)?;
                }
                b'q' => {
                    let index = self.input.byte("BINPUT")?;
                    self.memo_put(u32::from(index))?;
                }
                b'r' => {
                    let index = self.input.u32_le("LONG_BINPUT")?;
                    self.memo_put(index)?;
                }
                b'p' => {
                    let index = self.line_index("PUT")?;
                    self.memo_put(index)?;
                }
                b'h' => {
                    let index = self.input.byte("BINGET")?;
                    self.memo_get(u32::from(index))?;
                }
                b'j' => {
                    let index = self.input.u32_le("LONG_BINGET")?;
                    self.memo_get(index)?;
                }
                b'g' => {
                    let index = self.line_index("GET")?;
                    self.memo_get(index)?;
                }

                other => {
                    if let Some(name) = code_opcode(other) {
                        return Err(PickleError::CodeOpcode {
                            offset: self.at,
                            name,
                        });
                    }
                    return Err(PickleError::UnknownOpcode {
                        offset: self.at,
                        opcode: other,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(bytes: &[u8]) -> Result<Decoded, PickleError> {
        decode(bytes, &Limits::default(), &mut ())
    }

    /// Protocol 0's opcodes name memo slots in text: `p0\n` puts, `g0\n` gets; a line that is not a
    /// number is an error that names the opcode.
    #[test]
    fn text_memo_indices_are_read_and_bad_ones_refused() {
        // The text opcodes within a protocol 2 file (the machine reads nothing older).
        assert!(run(b"\x80\x02(I7\np0\ng0\nl.").is_ok());
        let message = |bytes: &[u8]| run(bytes).expect_err("refused").to_string();
        assert!(message(b"\x80\x02(I7\npx\nl.").contains("PUT with a bad index"));
        assert!(message(b"\x80\x02(I7\np0\ng-1\nl.").contains("GET with a bad index"));
        assert!(message(b"\x80\x02(I7\np0\ng1\nl.").contains("memo"));
    }

    #[test]
    fn decodes_a_dict_with_shared_values() {
        // {'a': [1, 2], 'b': <same list>} written by CPython, protocol 4.
        let bytes = b"\x80\x04\x95\x17\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01K\x02e\x8c\x01b\x94h\x02u.";
        let decoded = run(bytes).expect("decodes");
        let heap = &decoded.heap;
        let a = heap.get(decoded.root, "a").expect("a");
        let b = heap.get(decoded.root, "b").expect("b");
        assert_eq!(a, b, "memo identity is kept");
        let items = heap.items(a).expect("list");
        assert_eq!(
            items.iter().map(|&v| heap.i64(v)).collect::<Vec<_>>(),
            [Some(1), Some(2)]
        );
    }

    #[test]
    fn refuses_code_with_name_and_offset() {
        // GLOBAL 'os system' then REDUCE: what a malicious pickle does.
        let bytes = b"\x80\x02cos\nsystem\n(S'echo hi'\ntR.";
        let error = run(bytes).unwrap_err().to_string();
        assert!(error.contains("GLOBAL"), "{error}");
        assert!(error.contains("byte 2"), "{error}");
        assert!(error.contains("data only"), "{error}");
    }

    /// The remembered short string matches its own text only, by word when 16 bytes follow and
    /// by slice near the end of the buffer.
    #[test]
    fn a_short_string_matches_its_text_only() {
        let last = ShortString::new(b"N/A", Value::NONE);
        let mut bytes = b"N/A".to_vec();
        bytes.extend_from_slice(&[0xff; 16]);
        assert!(last.matches(&bytes, 0, &bytes[..3]));
        assert!(
            last.matches(b"N/A", 0, b"N/A"),
            "near the end of the buffer"
        );
        assert!(!last.matches(b"N/B____________________", 0, b"N/B"));
        assert!(!last.matches(b"N/A____________________", 0, b"N/A_"));
        assert!(!last.matches(b"N/", 0, b"N/"));
        let long = ShortString::new(b"sixteen bytes!!!", Value::NONE);
        let mut bytes = b"sixteen bytes!!!".to_vec();
        assert!(long.matches(&bytes, 0, &bytes.clone()));
        bytes[15] = b'?';
        assert!(!long.matches(&bytes, 0, &bytes.clone()));
    }

    /// Takes every flat dict it is offered before the dict is stored, as records 0, 1, ...;
    /// declines everything else.
    #[derive(Default)]
    struct TakesFlat {
        taken: u64,
    }

    impl Compactor for TakesFlat {
        fn compact(
            &mut self,
            _: &mut Heap,
            _: &mut Memo,
            _: Value,
            _: &[Value],
        ) -> Result<Option<Value>, PickleError> {
            Ok(None)
        }

        fn compact_flat(
            &mut self,
            _: &mut Heap,
            _: &mut Memo,
            items: &[Value],
        ) -> Result<Option<Value>, PickleError> {
            assert_eq!(items.len(), 4, "the two keys and their values");
            self.taken += 1;
            Ok(Some(Value::record(self.taken - 1)))
        }
    }

    /// A flat dict taken before it is stored leaves its record wherever the stored dict would
    /// have been, in the memo too; one that fetches its own memo entry is stored first, so it
    /// holds itself, as without the shortcut.
    #[test]
    fn a_flat_dict_is_stored_only_when_something_needs_it() {
        // ['a', 'b', {'a': 5, 'b': 6}, <the same dict>], each dict's keys fetched from the memo.
        let taken = b"\x80\x04]\x94(\x8c\x01a\x94\x8c\x01b\x94}\x94(h\x01K\x05h\x02K\x06uh\x03e.";
        let mut compactor = TakesFlat::default();
        let decoded = decode(&taken[..], &Limits::default(), &mut compactor).expect("decodes");
        let items = decoded.heap.items(decoded.root).expect("a list");
        assert_eq!(items[2..], [Value::record(0), Value::record(0)]);
        assert_eq!(compactor.taken, 1);
        // Without a compactor that takes it, the same dict is stored, twice in the list.
        let stored = run(taken).expect("decodes");
        let items = stored.heap.items(stored.root).expect("a list");
        assert_eq!(items[2], items[3]);
        assert_eq!(
            stored
                .heap
                .get(items[2], "b")
                .and_then(|v| stored.heap.i64(v)),
            Some(6)
        );

        // ['a', {'a': <itself>}]: the fetch of the dict's own entry stops the flat loop.
        let itself = b"\x80\x04]\x94(\x8c\x01a\x94}\x94(h\x01h\x02ue.";
        for decoded in [
            decode(&itself[..], &Limits::default(), &mut TakesFlat::default()),
            run(itself),
        ] {
            let decoded = decoded.expect("decodes");
            let dict = decoded.heap.items(decoded.root).expect("a list")[1];
            assert_eq!(decoded.heap.get(dict, "a"), Some(dict));
        }
    }

    #[test]
    fn a_missing_memo_index_is_an_error() {
        let error = run(b"\x80\x04h\x05.").unwrap_err().to_string();
        assert!(error.contains("index 5"), "{error}");
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let mut bytes = vec![0x80, 4];
        bytes.extend(std::iter::repeat_n(b'(', 1_000_000));
        let error = run(&bytes).unwrap_err().to_string();
        assert!(error.contains("nesting deeper"), "{error}");
    }

    #[test]
    fn a_length_beyond_the_file_is_truncation() {
        // BINUNICODE8 declaring 1 MiB (a length a snapshot may hold), followed by 3 bytes.
        let mut bytes = vec![0x80, 4, 0x8d];
        bytes.extend_from_slice(&(1u64 << 20).to_le_bytes());
        bytes.extend_from_slice(b"abc");
        let error = run(&bytes).unwrap_err();
        assert!(matches!(error, PickleError::Truncated { .. }), "{error}");
    }

    #[test]
    fn a_length_no_snapshot_needs_is_refused_before_reading() {
        // BINBYTES8 declaring one byte over the limit: refused at the length, at byte 11.
        let mut bytes = vec![0x80, 4, 0x8e];
        bytes.extend_from_slice(&(crate::pickle::MAX_STRING_BYTES + 1).to_le_bytes());
        bytes.extend_from_slice(b"abc");
        let error = run(&bytes).unwrap_err();
        assert!(
            matches!(
                error,
                PickleError::StringTooLong {
                    offset: 11,
                    what: "BINBYTES8",
                    ..
                }
            ),
            "{error}"
        );
    }
}
