//! The column threads: finished trace rows travel in batches to a thread that appends them to
//! the trace's columns and, beside it, to one that runs a [`TraceFollower`] over them, while
//! decoding goes on.

use super::super::follow::{FollowedEvent, TraceFollower};
use super::super::{ActionCode, StackId, Trace};
use super::parallel::RegionIds;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::ScopedJoinHandle;

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

impl Row {
    fn followed(&self) -> FollowedEvent {
        FollowedEvent {
            action: self.action,
            addr: self.addr,
            size: self.size,
            stream: self.stream,
            stack: self.stack,
        }
    }
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
}

impl Batch {
    /// The rows in order, with the trace's ids.
    #[inline]
    fn rows(&self) -> impl Iterator<Item = Row> + '_ {
        self.rows.iter().map(|row| match &self.ids {
            None => *row,
            Some(ids) => ids.global(row),
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

/// The column thread and the follower's, each fed every batch.
pub(super) struct ColumnThreads<'scope, F> {
    columns: SyncSender<Arc<Batch>>,
    column_thread: ScopedJoinHandle<'scope, Trace>,
    /// `None` for a follower that does nothing.
    follower: Option<(SyncSender<Arc<Batch>>, ScopedJoinHandle<'scope, F>)>,
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
    let mut has_time = false;
    for (event, row) in (trace.len()..).zip(batch.rows()) {
        trace.action.push(row.action);
        trace.addr.push(row.addr);
        trace.stack.push(row.stack);
        trace.size.push(row.size);
        trace.stream.push(row.stream);
        trace.time_us.push(row.time_us);
        trace.compile_context.set(event, row.context);
        trace.user_metadata.set(event, row.metadata);
        has_time |= row.has_time;
    }
    trace.has_time |= has_time;
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
    // The follower's thread first: it takes the rows so far before they move to the columns.
    let follower = if F::FOLLOWS {
        let mut pass = F::default();
        pass.take(trace.followed_events(0));
        let (batches, received) = sync_channel::<Arc<Batch>>(IN_FLIGHT);
        let spawned = std::thread::Builder::new()
            .name("snapview-follow".into())
            .spawn_scoped(scope, move || follow(pass, received));
        match spawned {
            Ok(thread) => Some((batches, thread)),
            Err(_) => return Columns::Inline(trace),
        }
    } else {
        None
    };
    match spawn_column_thread(scope, &mut trace, expected_rows) {
        Some((columns, column_thread)) => Columns::Threads(ColumnThreads {
            columns,
            column_thread,
            follower,
        }),
        None => {
            if let Some((batches, thread)) = follower {
                drop(batches);
                if let Err(panic) = thread.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            Columns::Inline(trace)
        }
    }
}

/// Batches in flight to each column thread: enough to ride out a slow batch, few enough that
/// a thread ahead does not hold much memory.
const IN_FLIGHT: usize = 4;

type ColumnThread<'scope> = (SyncSender<Arc<Batch>>, ScopedJoinHandle<'scope, Trace>);

/// Starts the thread that appends batches to `trace`'s columns, handing it the rows so far;
/// `None` (and `trace` as it was) if it cannot.
fn spawn_column_thread<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    trace: &mut Trace,
    expected_rows: usize,
) -> Option<ColumnThread<'scope>> {
    let (batches, received) = sync_channel::<Arc<Batch>>(IN_FLIGHT);
    let (start, start_receiver) = sync_channel::<Trace>(1);
    let thread = std::thread::Builder::new()
        .name("snapview-columns".into())
        .spawn_scoped(scope, move || {
            let trace = start_receiver.recv().unwrap_or_default();
            build_columns(trace, expected_rows, received)
        })
        .ok()?;
    match start.send(std::mem::take(trace)) {
        Ok(()) => Some((batches, thread)),
        // Only if the thread died at once; its panic is reported when joined.
        Err(returned) => {
            *trace = returned.0;
            drop(batches);
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
            None
        }
    }
}

impl<F> ColumnThreads<'_, F> {
    /// Hands `batch` to every thread. A thread gone (it panicked) is reported when joined.
    pub(super) fn send(&self, batch: Batch) {
        let batch = Arc::new(batch);
        if let Some((follower, _)) = &self.follower {
            let _ = follower.send(batch.clone());
        }
        let _ = self.columns.send(batch);
    }

    /// The columns and the follower after every batch.
    pub(super) fn join(self) -> (Trace, Option<F>) {
        drop(self.columns);
        let follower = self.follower.map(|(batches, thread)| {
            drop(batches);
            thread.join()
        });
        let trace = match self.column_thread.join() {
            Ok(trace) => trace,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        match follower.transpose() {
            Ok(pass) => (trace, pass),
            Err(panic) => std::panic::resume_unwind(panic),
        }
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

/// The column thread: appends each batch it receives to `trace`.
fn build_columns(mut trace: Trace, expected_rows: usize, batches: Receiver<Arc<Batch>>) -> Trace {
    // Growing the columns by doubling would move them (mremap) a dozen times each, and every
    // move interrupts the decoding thread's core to flush its TLB.
    trace.reserve_rows(expected_rows);
    for batch in batches {
        append_batch(&mut trace, &batch);
    }
    trace
}

/// The follower's thread: runs `pass` over every batch it receives, assuming all rows are one
/// device's, as they are in every file torch writes (the builder keeps its result only if so).
fn follow<F: TraceFollower>(mut pass: F, batches: Receiver<Arc<Batch>>) -> F {
    for batch in batches {
        pass.take(batch.rows().map(|row| row.followed()));
    }
    pass.finish();
    pass
}
