//! The column thread: finished trace rows travel in batches to a second thread that appends
//! them to the trace's columns (and runs a [`TraceFollower`] over them) while decoding goes on.

use super::super::follow::TraceFollower;
use super::super::{ActionCode, StackId, Trace};
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

/// Rows handed to the column builder at once: enough to make channel traffic negligible, few
/// enough (~0.5 MB) to stay in cache between the two threads.
pub(super) const BATCH: usize = 8192;

/// Where finished rows go: straight into columns, or to a thread that builds them.
// One per load, so the size of the inline variant does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Columns<'scope, F> {
    Inline(Trace),
    Worker {
        batches: SyncSender<Vec<Row>>,
        spare: Receiver<Vec<Row>>,
        worker: ScopedJoinHandle<'scope, (Trace, F)>,
    },
}

impl<F> std::fmt::Debug for Columns<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline(trace) => write!(f, "Inline({} rows)", trace.len()),
            Self::Worker { .. } => write!(f, "Worker"),
        }
    }
}

/// Appends rows to the numeric columns of `trace`.
pub(super) fn append_rows(trace: &mut Trace, rows: &[Row]) {
    let first = trace.len();
    trace.action.extend(rows.iter().map(|r| r.action));
    for (event, row) in (first..).zip(rows) {
        trace.addr.push(row.addr);
        trace.stack.push(row.stack);
        trace.size.push(row.size);
        trace.stream.push(row.stream);
        trace.time_us.push(row.time_us);
        trace.compile_context.set(event, row.context);
        trace.user_metadata.set(event, row.metadata);
    }
    trace.has_time |= rows.iter().any(|r| r.has_time);
}

/// The fewest pickle bytes a trace entry takes: torch writes 8 memoized keys and their values
/// (77 bytes for an entry with no frames, in the corpus).
pub(super) const BYTES_PER_ROW_AT_LEAST: u64 = 64;

/// A cap on the rows reserved from a file's size (a 17 GB pickle's worth).
pub(super) const MAX_EXPECTED_ROWS: usize = 1 << 28;

/// Rows after which the columns move to a second thread: below this the thread would cost more
/// than it saves, and small loads keep all their memory on the calling thread.
pub(super) const PIPELINE_AFTER: usize = 1 << 16;

/// Starts the column thread with the rows so far; if it cannot be started, the columns stay
/// inline.
pub(super) fn spawn_worker<'scope, 'env, F: TraceFollower>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    trace: Trace,
    expected_rows: usize,
) -> Columns<'scope, F> {
    let (batches, batch_receiver) = sync_channel::<Vec<Row>>(4);
    let (spare_sender, spare) = sync_channel::<Vec<Row>>(8);
    let (start, start_receiver) = sync_channel::<Trace>(1);
    let worker = std::thread::Builder::new()
        .name("snapview-columns".into())
        .spawn_scoped(scope, move || {
            let trace = start_receiver.recv().unwrap_or_default();
            build_columns(trace, expected_rows, batch_receiver, spare_sender)
        });
    match worker {
        Ok(worker) => match start.send(trace) {
            Ok(()) => Columns::Worker {
                batches,
                spare,
                worker,
            },
            // Only if the thread died at once; its panic is reported when joined.
            Err(returned) => {
                drop(batches);
                if let Err(panic) = worker.join() {
                    std::panic::resume_unwind(panic);
                }
                Columns::Inline(returned.0)
            }
        },
        Err(_) => Columns::Inline(trace),
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

/// The column builder thread: appends each batch it receives, hands the buffer back, and runs
/// the follower over the new rows (while they are in cache), assuming all rows are one
/// device's, as they are in every file torch writes; the builder keeps its result only if so.
pub(super) fn build_columns<F: TraceFollower>(
    mut trace: Trace,
    expected_rows: usize,
    batches: Receiver<Vec<Row>>,
    spare: SyncSender<Vec<Row>>,
) -> (Trace, F) {
    // Growing the columns by doubling would move them (mremap) a dozen times each, and every
    // move interrupts the decoding thread's core to flush its TLB.
    trace.reserve_rows(expected_rows);
    let mut pass = F::default();
    pass.advance(&trace, false);
    for mut batch in batches {
        append_rows(&mut trace, &batch);
        batch.clear();
        // The decoder may have finished and stopped taking buffers back; that is fine.
        let _ = spare.try_send(batch);
        pass.advance(&trace, false);
    }
    pass.advance(&trace, true);
    (trace, pass)
}
