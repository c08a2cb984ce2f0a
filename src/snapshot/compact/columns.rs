//! The column threads: finished trace rows travel in batches to two threads that append them
//! to half the trace's columns each and, beside them, to one that runs a [`TraceFollower`]
//! over them, while decoding goes on.

use super::super::follow::{FollowedEvent, TraceFollower};
use super::super::{ActionCode, StackId, Trace};
use super::parallel::{Region, RegionIds};
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

/// One trace entry on its way to the columns.
#[derive(Debug, Clone, Copy)]
pub(super) struct Row {
    pub(super) addr: u64,
    pub(super) size: u64,
    pub(super) stream: u64,
    pub(super) time_us: i64,
    pub(super) stack: StackId,
    pub(super) context: u32,
    pub(super) metadata: u32,
    pub(super) action: ActionCode,
    pub(super) has_time: bool,
}

/// Rows handed to the column threads at once: enough to make channel traffic negligible, few
/// enough (~0.5 MB) to stay in cache between the threads.
pub(super) const BATCH: usize = 8192;

/// Rows on their way to the columns: a batch of the sequential decoder's, with the trace's
/// ids, or a region of the parallel decoder's, with the region's own ids and the tables that
/// make them the trace's (so the thread that splices regions in never touches their rows).
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub(super) rows: Vec<Row>,
    pub(super) ids: Option<RegionIds>,
    /// What is left of the region the rows were decoded in, held only to be freed with the
    /// batch by the column thread done with it last: the splicing thread is the one a parallel
    /// decode waits on, and a free of a large buffer is an `munmap` there.
    pub(super) _region: Option<Region>,
}

impl Batch {
    /// The trace's stack of `row`.
    #[inline]
    fn stack(&self, row: &Row) -> StackId {
        match &self.ids {
            None => row.stack,
            Some(ids) => ids.stack(row.stack),
        }
    }

    /// The trace's action of `row`.
    #[inline]
    fn action(&self, row: &Row) -> ActionCode {
        match &self.ids {
            None => row.action,
            Some(ids) => ids.action(row.action),
        }
    }

    /// The trace's id of a text of a row.
    #[inline]
    fn text(&self, id: u32) -> u32 {
        match &self.ids {
            None => id,
            Some(ids) => ids.text(id),
        }
    }

    /// The rows as a follower takes them. (Each thread maps only the ids it reads.)
    fn followed(&self) -> impl Iterator<Item = FollowedEvent> + '_ {
        self.rows.iter().map(|row| FollowedEvent {
            action: self.action(row),
            addr: row.addr,
            size: row.size,
            stream: row.stream,
            stack: self.stack(row),
        })
    }
}

/// Where finished rows go: straight into columns, or to the threads that build them.
// One per load, so the size of the inline variant does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Columns<'scope, F> {
    Inline(Trace),
    Threads(ColumnThreads<'scope, F>),
}

/// The threads fed every batch: two that build half the columns each (one alone set the pace
/// of the whole decode, behind every decoding core), and the follower's.
pub(super) struct ColumnThreads<'scope, F> {
    blocks: Sink<'scope, Trace>,
    context: Sink<'scope, Trace>,
    /// `None` for a follower that does nothing.
    follower: Option<Sink<'scope, F>>,
}

impl<F> std::fmt::Debug for Columns<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline(trace) => write!(f, "Inline({} rows)", trace.len()),
            Self::Threads(_) => write!(f, "Threads"),
        }
    }
}

/// Appends the rows of `batch` to the numeric columns of `trace`.
pub(super) fn append_batch(trace: &mut Trace, batch: &Batch) {
    append_blocks(trace, batch);
    append_context(trace, batch);
}

/// The columns that say what happened to which block: action, address, size and stack.
fn append_blocks(trace: &mut Trace, batch: &Batch) {
    for row in &batch.rows {
        trace.action.push(batch.action(row));
        trace.addr.push(row.addr);
        trace.size.push(row.size);
        trace.stack.push(batch.stack(row));
    }
}

/// The columns that say where and when: stream, time and the two texts. A thread that builds
/// only these holds them in a trace whose other columns stay empty.
fn append_context(trace: &mut Trace, batch: &Batch) {
    let mut has_time = false;
    for (event, row) in (trace.stream.len()..).zip(&batch.rows) {
        trace.stream.push(row.stream);
        trace.time_us.push(row.time_us);
        trace.compile_context.set(event, batch.text(row.context));
        trace.user_metadata.set(event, batch.text(row.metadata));
        has_time |= row.has_time;
    }
    trace.has_time |= has_time;
}

/// Moves the context columns of `trace` (see [`append_context`]) into a trace of their own.
fn take_context(trace: &mut Trace) -> Trace {
    Trace {
        stream: std::mem::take(&mut trace.stream),
        time_us: std::mem::take(&mut trace.time_us),
        compile_context: std::mem::take(&mut trace.compile_context),
        user_metadata: std::mem::take(&mut trace.user_metadata),
        has_time: std::mem::take(&mut trace.has_time),
        ..Trace::default()
    }
}

/// Puts back the context columns [`take_context`] moved out.
fn put_context(trace: &mut Trace, context: Trace) {
    trace.stream = context.stream;
    trace.time_us = context.time_us;
    trace.compile_context = context.compile_context;
    trace.user_metadata = context.user_metadata;
    trace.has_time |= context.has_time;
}

/// The fewest pickle bytes a trace entry takes: torch writes 8 memoized keys and their values
/// (77 bytes for an entry with no frames, in the corpus).
pub(super) const BYTES_PER_ROW_AT_LEAST: u64 = 64;

/// A cap on the rows reserved from a file's size (a 17 GB pickle's worth).
pub(super) const MAX_EXPECTED_ROWS: usize = 1 << 28;

/// Rows after which the columns move to a second thread: below this the thread would cost more
/// than it saves, and small loads keep all their memory on the calling thread.
pub(super) const PIPELINE_AFTER: usize = 1 << 16;

/// Starts the column threads with the rows so far; if they cannot be started, the columns stay
/// inline.
pub(super) fn spawn_threads<'scope, 'env, F: TraceFollower>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    mut trace: Trace,
    expected_rows: usize,
) -> Columns<'scope, F> {
    // The follower first: it takes the rows so far before they move to the columns.
    let follower = if F::FOLLOWS {
        let mut pass = F::default();
        pass.take(trace.followed_events(0));
        let take = |pass: &mut F, batch: &Batch| pass.take(batch.followed());
        match Sink::spawn(scope, "snapview-follow", pass, take, F::finish) {
            Ok(sink) => Some(sink),
            Err(_) => return Columns::Inline(trace),
        }
    } else {
        None
    };
    // Reserved once: growing the columns by doubling would move them (mremap) a dozen times
    // each, and every move interrupts the decoding threads' cores to flush their TLBs.
    let mut context = take_context(&mut trace);
    reserve_blocks(&mut trace, expected_rows);
    reserve_context(&mut context, expected_rows);
    let blocks = match Sink::spawn(scope, "snapview-blocks", trace, append_blocks, no_finish) {
        Ok(blocks) => blocks,
        Err(mut trace) => {
            put_context(&mut trace, context);
            follower.map(Sink::join);
            return Columns::Inline(trace);
        }
    };
    match Sink::spawn(
        scope,
        "snapview-context",
        context,
        append_context,
        no_finish,
    ) {
        Ok(context) => Columns::Threads(ColumnThreads {
            blocks,
            context,
            follower,
        }),
        Err(context) => {
            let mut trace = blocks.join();
            put_context(&mut trace, context);
            follower.map(Sink::join);
            Columns::Inline(trace)
        }
    }
}

/// Reserves room for `rows` rows in the block columns, where the memory can be had (address
/// space only: pages are touched as rows arrive).
fn reserve_blocks(trace: &mut Trace, rows: usize) {
    let extra = rows.saturating_sub(trace.len());
    let _ = trace.action.try_reserve(extra);
    trace.addr.reserve(extra);
    trace.size.reserve(extra);
    trace.stack.reserve(extra);
}

/// The same for the context columns.
fn reserve_context(trace: &mut Trace, rows: usize) {
    let extra = rows.saturating_sub(trace.stream.len());
    trace.stream.reserve(extra);
    trace.time_us.reserve(extra);
}

fn no_finish(_: &mut Trace) {}

/// Batches in flight to each thread: enough to ride out a burst (the splicing thread hands
/// over several regions in a row whenever the workers are ahead of it, and it is the thread a
/// parallel decode waits on: with 4, it waited 25-60 ms of the 287 MB file's 215 ms on the
/// column threads on 16 cores; with 16, not at all), few enough that the rows waiting (a
/// region's, ~0.6 MB, or a batch's, ~0.4 MB, each, and what is left of its region) stay a
/// small part of the peak. On the 16-core host, 16 against 8 gained the ten-times file no time
/// beyond the host's noise, with the same peak once large buffers were freed at once (see
/// `main.rs`; before that, 16 with another change cost it about 12 MB more).
const IN_FLIGHT: usize = 8;

/// A thread that applies every batch it is sent to its state `T`, and hands the state back
/// when joined.
struct Sink<'scope, T> {
    batches: SyncSender<Arc<Batch>>,
    thread: ScopedJoinHandle<'scope, T>,
    /// How long the sending thread waited for this one to take a batch: the time it set the
    /// decode's pace (logged at debug level, to find the serial step that bounds a load).
    waited: Duration,
}

impl<'scope, T: Send + Default + 'scope> Sink<'scope, T> {
    /// Starts the thread with `state`, or hands `state` back if it cannot. The thread calls
    /// `take` with each batch, then `finish`.
    fn spawn<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        name: &str,
        state: T,
        take: impl Fn(&mut T, &Batch) + Send + 'scope,
        finish: fn(&mut T),
    ) -> Result<Self, T> {
        let (batches, received) = sync_channel::<Arc<Batch>>(IN_FLIGHT);
        let (start, start_receiver) = sync_channel::<T>(1);
        let label = name.to_owned();
        let spawned =
            std::thread::Builder::new()
                .name(name.into())
                .spawn_scoped(scope, move || {
                    let mut state = start_receiver.recv().unwrap_or_default();
                    let mut busy = Duration::ZERO;
                    for batch in received {
                        let started = Instant::now();
                        take(&mut state, &batch);
                        busy += started.elapsed();
                    }
                    finish(&mut state);
                    tracing::debug!(
                        thread = %label,
                        busy_ms = busy.as_millis() as u64,
                        "batches taken"
                    );
                    state
                });
        let Ok(thread) = spawned else {
            return Err(state);
        };
        match start.send(state) {
            Ok(()) => Ok(Self {
                batches,
                thread,
                waited: Duration::ZERO,
            }),
            // Only if the thread died at once; its panic goes on here.
            Err(returned) => {
                drop(batches);
                match thread.join() {
                    Ok(_) => Err(returned.0),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        }
    }
}

impl<T> Sink<'_, T> {
    /// Hands `batch` to the thread. A thread gone (it panicked) is reported when joined.
    fn send(&mut self, batch: Arc<Batch>) {
        let started = Instant::now();
        let _ = self.batches.send(batch);
        self.waited += started.elapsed();
    }

    /// The state after every batch sent. A panic on the thread goes on here.
    fn join(self) -> T {
        if let Some(name) = self.thread.thread().name() {
            tracing::debug!(
                thread = %name,
                waited_ms = self.waited.as_millis() as u64,
                "sent to"
            );
        }
        drop(self.batches);
        match self.thread.join() {
            Ok(state) => state,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl<F> ColumnThreads<'_, F> {
    /// Hands `batch` to every thread. A thread gone (it panicked) is reported when joined.
    pub(super) fn send(&mut self, batch: Batch) {
        let batch = Arc::new(batch);
        if let Some(follower) = &mut self.follower {
            follower.send(batch.clone());
        }
        self.context.send(batch.clone());
        self.blocks.send(batch);
    }

    /// The columns and the follower after every batch.
    pub(super) fn join(self) -> (Trace, Option<F>) {
        let follower = self.follower.map(Sink::join);
        let mut trace = self.blocks.join();
        put_context(&mut trace, self.context.join());
        (trace, follower)
    }
}

/// Starts a column thread with the rows so far, expecting about this many in all (see
/// [`TraceCompactor::pipelined`]).
pub(super) type SpawnFn<'scope, F> = Box<dyn FnOnce(Trace, usize) -> Columns<'scope, F> + 'scope>;

pub(super) struct Spawn<'scope, F>(pub(super) Option<SpawnFn<'scope, F>>);

impl<F> std::fmt::Debug for Spawn<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Spawn" } else { "None" })
    }
}
