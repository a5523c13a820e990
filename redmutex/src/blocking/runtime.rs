//! The runtime behind the blocking API: one dedicated thread drives the async
//! implementation's I/O and timers and runs its background tasks (renewals, wake-up,
//! releases), which go on while the caller's thread is busy; each blocking call runs its
//! future to completion on the caller's thread.

use std::future::Future;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::error::Error;

/// Shared by a blocking locker, its clones and everything they hand out: the thread stops
/// when the last of them is gone.
#[derive(Clone)]
pub(crate) struct Runtime(Arc<Inner>);

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Runtime")
    }
}

struct Inner {
    // `Option` only so that Drop can move it out for a shutdown that never blocks.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    handle: tokio::runtime::Handle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let runtime = self.runtime.get_mut().map(Option::take);
        if let Ok(Some(runtime)) = runtime {
            // Never blocks, and may run inside another runtime (a guard dropped in async
            // code). Releases started in the background finish on their own (see
            // `crate::background`).
            runtime.shutdown_background();
        }
    }
}

impl Runtime {
    pub(crate) fn new() -> Result<Runtime, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redmutex-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::Redis(e.into()))?;
        let handle = runtime.handle().clone();
        Ok(Runtime(Arc::new(Inner {
            runtime: Mutex::new(Some(runtime)),
            handle,
        })))
    }

    /// Runs `work` to completion on the calling thread, with the runtime's thread driving
    /// its I/O and timers and running what it spawns (renewers, wake-up subscribers).
    /// Refused with [`Error::InsideRuntime`] on a thread that runs an async runtime, where
    /// waiting would stall that runtime (and tokio would panic); allowed in
    /// `spawn_blocking`, whose threads are there to block.
    pub(crate) fn call<F: Future>(&self, work: F) -> Result<F::Output, Error> {
        if !may_block() {
            return Err(Error::InsideRuntime);
        }
        Ok(self.0.handle.block_on(work))
    }

    /// Runs `work` (a release, a resignation) on the runtime's thread and waits for it at
    /// most `wait`; inside an async runtime it is only started. For `Drop`, which must
    /// neither fail nor block for long.
    pub(crate) fn finish<F>(&self, work: F, wait: Duration)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (done, finished) = mpsc::sync_channel(1);
        self.0.handle.spawn(async move {
            work.await;
            let _ = done.send(());
        });
        if may_block() {
            let _ = finished.recv_timeout(wait);
        }
    }
}

/// Whether the calling thread may wait: it runs no async runtime. Outside any runtime, it
/// may; a runtime's worker — an async task, or the thread driving a current-thread
/// runtime — may not; nor the thread running a multi-thread runtime's `block_on`, which
/// tokio tells apart from a plain thread only by its having no task; a `spawn_blocking`
/// closure runs as a task on a thread that is no worker, and may.
fn may_block() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return true;
    }
    tokio::runtime::worker_index().is_none() && tokio::task::try_id().is_some()
}
