//! A small tokio runtime of a remote backend's own (PostgreSQL's driver, object storage), so
//! the store's blocking methods can wait for async work from anywhere: a blocking thread, a
//! plain CLI thread, a test, or (briefly, as SQLite's calls do) an async task.
//!
//! `Runtime::block_on` would panic when called inside another runtime's async context, so the
//! work is spawned on this runtime and its answer waited for on a plain channel instead.

use std::future::Future;

/// Runs futures to completion for blocking callers.
pub struct BlockingRuntime {
    runtime: Option<tokio::runtime::Runtime>,
}

impl BlockingRuntime {
    /// A runtime of `threads` workers named `name`.
    pub fn new(name: &str, threads: usize) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(name)
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Runs `work` on this runtime and waits for its answer on the caller's thread.
    pub fn run<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> T {
        let (sender, answer) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            // The caller waits for this; it cannot have gone.
            let _ = sender.send(work.await);
        });
        match answer.recv() {
            Ok(value) => value,
            // The task panicked (its sender dropped unsent): the panic goes on in the caller,
            // as it would have had the work run there.
            Err(_) => panic!("a store task panicked"),
        }
    }

    /// The runtime's handle, to spawn background work on it.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle(),
            None => unreachable!("the runtime is only taken when dropped"),
        }
    }
}

impl Drop for BlockingRuntime {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which panics inside an async context (the
        // server's state is dropped there); nothing left on it needs waiting for.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
