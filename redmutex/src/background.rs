//! Releases that nobody waits for — a dropped [`Lock`](crate::Lock) or lease, a cancelled
//! acquire's clean-up — and that must happen even when the program is ending.
//!
//! Such a release starts as a task on the caller's tokio runtime. A runtime that shuts down
//! drops its tasks unfinished (it does so as `main` returns, right after a guard was
//! dropped on the way out), and outside a runtime there is nothing to run a task on. In
//! both cases the release is handed to a thread of redmutex's own, started on first need,
//! with a small runtime of its own: it tries a few times within [`GIVE_UP_AFTER`] (the
//! connection's own runtime may be gone: a `ConnectionManager` reconnects on this one, a
//! bare `MultiplexedConnection` cannot, and its keys expire by their TTL). A process that
//! exits while such releases are pending waits for them, at most [`EXIT_WAIT`], in an exit
//! handler. (`std::process::exit` called while a runtime still runs is not covered: that
//! runtime's unfinished tasks are neither dropped nor run, so nothing hands them over.)

use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::sync::lock;
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::time::Instant;

/// One try of a release: resolves to whether Redis answered (released, or not ours any
/// more); `false` means try again.
pub(crate) type Try = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send>;

/// How long the thread keeps trying one release before leaving its keys to their TTL.
pub(crate) const GIVE_UP_AFTER: Duration = Duration::from_secs(2);
/// How long an exiting process waits for releases still pending on the thread.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(2);
/// Tries per release on the thread, and the longest a single try may take.
const TRIES: u32 = 6;
const TRY_TIMEOUT: Duration = Duration::from_millis(500);

/// Starts `release` on the current runtime, or hands it to the thread when there is none;
/// returns at once. If the try fails (the connection broke: a runtime shutting down drops
/// the connection's own task too), or the runtime drops the task before it has finished,
/// the thread takes the release over.
pub(crate) fn release(release: Try) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return hand_over(release);
    };
    let mut unfinished = Unfinished(Some(release));
    runtime.spawn(async move {
        if let Some(release) = unfinished.0.as_mut()
            && release().await
        {
            // Done: nothing to hand over when the task ends.
            drop(unfinished.0.take());
        }
    });
}

/// A release whose task has not finished: handed to the thread when dropped unfinished.
struct Unfinished(Option<Try>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            hand_over(release);
        }
    }
}

/// The thread that finishes releases, with the number it has not finished yet.
struct Finisher {
    /// The process that started the thread: after a `fork`, the child has no such thread
    /// and starts its own.
    pid: u32,
    jobs: UnboundedSender<Try>,
}

static FINISHER: Mutex<Option<Finisher>> = Mutex::new(None);
static PENDING: Mutex<usize> = Mutex::new(0);
static FINISHED: Condvar = Condvar::new();

fn hand_over(release: Try) {
    // A simulated run stays on its own thread and clock (see `crate::simulation`): the
    // release is retried there, or goes with the run.
    #[cfg(feature = "simulation")]
    if crate::simulation::active() {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(retry(release));
        }
        return;
    }
    *lock(&PENDING) += 1;
    let mut finisher = lock(&FINISHER);
    let pid = std::process::id();
    let release = match finisher.as_ref().filter(|f| f.pid == pid) {
        Some(running) => match running.jobs.send(release) {
            Ok(()) => return,
            Err(unsent) => unsent.0,
        },
        None => release,
    };
    match start() {
        Some(jobs) => {
            let _ = jobs.send(release);
            *finisher = Some(Finisher { pid, jobs });
        }
        // No thread could be started: the keys expire by their TTL.
        None => finished(),
    }
}

/// Starts the thread, and registers the exit handler once per process. The thread builds
/// its runtime itself: one dropped here, inside a task being dropped, would panic.
fn start() -> Option<UnboundedSender<Try>> {
    let (jobs, mut queue) = mpsc::unbounded_channel::<Try>();
    std::thread::Builder::new()
        .name("redmutex-release".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime {
                Ok(runtime) => runtime.block_on(async move {
                    while let Some(release) = queue.recv().await {
                        tokio::spawn(finish(release));
                    }
                }),
                // No runtime: every release handed over is left to its TTL.
                Err(_) => {
                    while queue.blocking_recv().is_some() {
                        finished();
                    }
                }
            }
        })
        .ok()?;
    static REGISTERED: Mutex<Option<u32>> = Mutex::new(None);
    let mut registered = lock(&REGISTERED);
    if *registered != Some(std::process::id()) {
        // SAFETY: registers a function that only locks, waits on a condition variable with
        // a timeout, and returns; it never unwinds.
        unsafe {
            libc::atexit(wait_at_exit);
        }
        *registered = Some(std::process::id());
    }
    Some(jobs)
}

/// Tries `release` until Redis answers, a few times within [`GIVE_UP_AFTER`], then counts
/// it finished — also when a try panics. One does when the connection's reconnection was
/// started on the runtime that has just shut down: polling its timer panics (tokio's "being
/// shutdown"), and so would every further try through that connection. Its keys are left
/// to their TTL; the panic stays in its task, and the exit does not wait for it.
async fn finish(release: Try) {
    if let Err(failed) = tokio::spawn(retry(release)).await
        && failed.is_panic()
    {
        tracing::warn!(
            "redmutex: a release could not be sent as the program ended: its connection \
             was left unusable by the runtime that shut down; the lock expires by its TTL"
        );
    }
    finished();
}

/// Tries `release` until Redis answers, a few times within [`GIVE_UP_AFTER`].
async fn retry(mut release: Try) {
    let give_up = Instant::now() + GIVE_UP_AFTER;
    let mut pause = Duration::from_millis(10);
    for _ in 0..TRIES {
        let left = give_up.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        // A connection whose runtime shut down a moment ago may still accept the request
        // without anyone to send it: bounded, then tried again once it is seen closed
        // (a ConnectionManager then reconnects, on this thread's runtime).
        if let Ok(true) = tokio::time::timeout(left.min(TRY_TIMEOUT), release()).await {
            break;
        }
        tokio::time::sleep(pause.min(left)).await;
        pause *= 2;
    }
}

fn finished() {
    let mut pending = lock(&PENDING);
    *pending = pending.saturating_sub(1);
    if *pending == 0 {
        FINISHED.notify_all();
    }
}

/// The exit handler: waits for pending releases, at most [`EXIT_WAIT`] — in the process
/// whose thread runs them (a forked child inherits the handler, not the thread).
extern "C" fn wait_at_exit() {
    let ours = lock(&FINISHER)
        .as_ref()
        .is_some_and(|f| f.pid == std::process::id());
    if !ours {
        return;
    }
    let pending = lock(&PENDING);
    let _ = FINISHED.wait_timeout_while(pending, EXIT_WAIT, |pending| *pending > 0);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Waits until no release is pending, at most `limit`; returns whether none is.
    fn none_pending_within(limit: Duration) -> bool {
        let pending = lock(&PENDING);
        let (pending, _) = FINISHED
            .wait_timeout_while(pending, limit, |pending| *pending > 0)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *pending == 0
    }

    #[test]
    fn a_release_that_panics_is_counted_finished_and_the_thread_goes_on() {
        hand_over(Box::new(|| {
            Box::pin(async { panic!("a timer of a runtime being shut down") })
        }));
        assert!(
            none_pending_within(GIVE_UP_AFTER + Duration::from_secs(1)),
            "the exit would wait for a release that can never finish"
        );
        let sent = Arc::new(AtomicBool::new(false));
        let flag = sent.clone();
        hand_over(Box::new(move || {
            let flag = flag.clone();
            Box::pin(async move {
                flag.store(true, Ordering::SeqCst);
                true
            })
        }));
        assert!(none_pending_within(GIVE_UP_AFTER + Duration::from_secs(1)));
        assert!(
            sent.load(Ordering::SeqCst),
            "the thread stopped with the panic"
        );
    }
}
