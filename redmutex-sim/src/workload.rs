//! What the simulated processes' tasks do, again and again until the run ends: hold a
//! primitive (carefully, kept alive, naively, for a minimum hold, or abandoning it), wait
//! for a name to be free, force its release, or follow an election. Each records what it
//! saw — and nothing it was told about other holders — for the checker.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redmutex::claim::Held;
use redmutex::{retry, Acquire, Error, KeepAlive, Lock, Locker, LostSignal, Writes};

use crate::history::{Ask, Attempt, FailedTry, GuardedWrite, Observation, Section, Watch};
use crate::net::{precise_sleep_until, SimConn};
use crate::plan::{Primitive, Role, Style, TaskPlan};
use crate::state::{breach_between, Shared};
use testkit::Rng;

/// One task: its plan, its stream of random numbers, and where it records.
struct Task {
    world: Arc<Shared>,
    locker: Locker<SimConn>,
    wake_up: bool,
    index: usize,
    plan: TaskPlan,
    rng: Rng,
    end: Duration,
    /// How many sections the open one spans: one per name it holds.
    span: usize,
}

pub(crate) async fn run(
    world: Arc<Shared>,
    locker: Locker<SimConn>,
    wake_up: bool,
    index: usize,
    plan: TaskPlan,
    end: Duration,
) {
    let mut task = Task {
        world,
        locker,
        wake_up,
        index,
        rng: Rng::new(plan.seed),
        plan,
        end,
        span: 1,
    };
    loop {
        // (To the microsecond: moments between the timer's milliseconds matter.)
        let think = task.rng.between(Duration::ZERO, Duration::from_millis(300));
        precise_sleep_until(tokio::time::Instant::now() + think).await;
        task.gate().await;
        if task.over() {
            return;
        }
        match task.plan.role {
            Role::Hold(primitive, style) => task.hold(primitive, style).await,
            Role::Watch => task.watch().await,
            Role::Force => task.force().await,
            Role::Observe => task.observe().await,
        }
    }
}

/// How an acquire ended.
enum Got<T> {
    Held(T),
    Failed(Error),
    Cancelled,
}

impl Task {
    fn over(&self) -> bool {
        self.world.stopping() || self.world.now() >= self.end
    }

    /// A paused process does nothing until it resumes.
    async fn gate(&self) {
        self.world.processes[self.plan.process].resumed().await;
    }

    fn name(&self) -> &'static str {
        self.plan.name
    }

    /// The second name `primitive` is taken with (a plain lock, all or nothing).
    fn also(&self, primitive: Primitive) -> Option<&'static str> {
        self.plan.also.filter(|_| primitive == Primitive::Lock)
    }

    /// The acquire's options: the plan's pause and deadline, a fence when asked for (a
    /// naive holder always takes one: it writes with it), a minimum hold of a TTL or two
    /// for a periodic holder.
    fn configure<'a, P: Held>(
        &mut self,
        acquire: Acquire<'a, SimConn, P>,
        style: Style,
        attempt: usize,
    ) -> (Acquire<'a, SimConn, P>, Option<Duration>) {
        let mut acquire = acquire
            .retry(retry::constant(self.plan.pause))
            .deadline(self.plan.deadline)
            .on_failed_try(self.failures(attempt));
        if self.plan.fenced || style == Style::Naive {
            acquire = acquire.with_fence();
        }
        let mut keep = None;
        if style == Style::Periodic {
            let hold = self.plan.ttl * (1 + self.rng.below(2) as u32);
            acquire = acquire.min_hold(hold);
            keep = Some(hold);
        }
        (acquire, keep)
    }

    /// The failed-try callback that records, for attempt `attempt`, when each try failed,
    /// whether it found the name held (rather than an error: the retry pause follows), and
    /// which nodes could not be asked.
    fn failures(
        &self,
        attempt: usize,
    ) -> impl FnMut(&redmutex::FailedTry<'_>) + Send + 'static + use<> {
        let world = self.world.clone();
        move |failed| {
            let held = matches!(failed.reason, redmutex::TryFailure::Held { .. });
            let unreachable = match failed.reason {
                redmutex::TryFailure::NoQuorum(why) => (why.failures.iter())
                    .filter(|node| node.error.is_unreachable())
                    .map(|node| node.node)
                    .collect(),
                _ => Vec::new(),
            };
            let at = world.now();
            (world.history().attempts[attempt].failures).push(FailedTry {
                at,
                held,
                unreachable,
            });
        }
    }

    /// Awaits `acquire`, or drops it at a random moment (cancellation) when the plan says.
    async fn obtain<T>(
        &mut self,
        acquire: impl std::future::IntoFuture<Output = Result<T, Error>>,
    ) -> Got<T> {
        let cancel = match self.rng.chance(self.plan.cancel) {
            true => Some(self.rng.between(Duration::ZERO, self.plan.deadline)),
            false => None,
        };
        let outcome = match cancel {
            Some(after) => match tokio::time::timeout(after, acquire.into_future()).await {
                Ok(outcome) => outcome,
                Err(_) => return Got::Cancelled,
            },
            None => acquire.await,
        };
        match outcome {
            Ok(held) => Got::Held(held),
            Err(e) => Got::Failed(e),
        }
    }

    fn begin_attempt(&self, primitive: Primitive) -> usize {
        let mut history = self.world.history();
        history.attempts.push(Attempt {
            task: self.index,
            process: self.plan.process,
            primitive,
            name: self.name(),
            also: self.also(primitive),
            asked: self.world.now(),
            ended: None,
            obtained: false,
            wake_up: self.wake_up,
            cancelled: false,
            deadline: self.plan.deadline,
            failures: Vec::new(),
        });
        history.attempts.len() - 1
    }

    fn end_attempt<T>(&self, attempt: usize, got: &Got<T>) {
        let now = self.world.now();
        let mut history = self.world.history();
        let record = &mut history.attempts[attempt];
        record.ended = Some(now);
        record.obtained = matches!(got, Got::Held(_));
        record.cancelled = matches!(got, Got::Cancelled);
        drop(history);
        if let Got::Failed(e) = got {
            self.world
                .note(|| format!("t{}: {} failed: {e}", self.index, self.name()));
            if e.is_invalid_argument() {
                self.world.found(
                    "invalid-argument",
                    format!("t{} was refused: {e}", self.index),
                );
            }
        }
        if let Got::Cancelled = got {
            self.world
                .note(|| format!("t{}: acquire cancelled", self.index));
        }
    }

    async fn hold(&mut self, primitive: Primitive, style: Style) {
        let attempt = self.begin_attempt(primitive);
        let asked = self.world.now();
        let ttl = self.plan.ttl;
        let locker = self.locker.clone();
        let name = self.name();
        match primitive {
            Primitive::Lock => {
                let names = std::iter::once(name).chain(self.also(primitive));
                let acquire = locker.acquire_all(names, ttl);
                let (acquire, keep) = self.configure(acquire, style, attempt);
                let got = self.obtain(acquire).await;
                self.end_attempt(attempt, &got);
                if let Got::Held(lock) = got {
                    self.section(lock, primitive, style, asked, keep).await;
                }
            }
            Primitive::Permit(limit) => {
                let Ok(semaphore) = locker.semaphore(name, limit) else {
                    return;
                };
                let (acquire, keep) = self.configure(semaphore.acquire(1, ttl), style, attempt);
                let got = self.obtain(acquire).await;
                self.end_attempt(attempt, &got);
                if let Got::Held(lock) = got {
                    self.section(lock, primitive, style, asked, keep).await;
                }
            }
            Primitive::Read => {
                let Ok(rw) = locker.rw_lock(name) else { return };
                let (acquire, keep) = self.configure(rw.read(ttl), style, attempt);
                let got = self.obtain(acquire).await;
                self.end_attempt(attempt, &got);
                if let Got::Held(lock) = got {
                    self.section(lock, primitive, style, asked, keep).await;
                }
            }
            Primitive::Write => {
                let Ok(rw) = locker.rw_lock(name) else { return };
                let (acquire, keep) = self.configure(rw.write(ttl), style, attempt);
                let got = self.obtain(acquire).await;
                self.end_attempt(attempt, &got);
                if let Got::Held(lock) = got {
                    self.writer(lock, style, asked, keep).await;
                }
            }
            Primitive::Fair => {
                let Ok(fair) = locker.fair_lock(name) else {
                    return;
                };
                let (acquire, keep) = self.configure(fair.acquire(ttl), style, attempt);
                let got = self.obtain(acquire).await;
                self.end_attempt(attempt, &got);
                if let Got::Held(lock) = got {
                    self.section(lock, primitive, style, asked, keep).await;
                }
            }
            Primitive::Leader => self.lead(attempt, asked).await,
        }
    }

    /// Records a new section — one per name it holds, edited together; returns the index
    /// of the first.
    fn open(&mut self, primitive: Primitive, style: Style, asked: Duration) -> usize {
        let now = self.world.now();
        let names: Vec<&'static str> = std::iter::once(self.name())
            .chain(self.also(primitive))
            .collect();
        self.span = names.len();
        let mut history = self.world.history();
        let first = history.sections.len();
        history
            .sections
            .extend(names.into_iter().map(|name| Section {
                task: self.index,
                process: self.plan.process,
                primitive,
                style,
                name,
                fence: None,
                asked,
                start: now,
                valid: now,
                keep_until: None,
                last_act: None,
                overran: false,
                released: None,
                release_held: None,
                told_lost: None,
                heard_ask: None,
                shortened: false,
                renewed_with: None,
            }));
        first
    }

    fn edit(&self, section: usize, mut change: impl FnMut(&mut Section)) {
        let mut history = self.world.history();
        history.sections[section..section + self.span]
            .iter_mut()
            .for_each(&mut change);
    }

    /// The holder acts now: it believes it holds the lock (and writes with its fence).
    fn act(&self, section: usize, valid: tokio::time::Instant, fence: Option<u64>) {
        let now = self.world.now();
        let valid = self.world.at(valid);
        let mut history = self.world.history();
        for at in section..section + self.span {
            if let Some(fence) = fence {
                let name = history.sections[at].name;
                let accepted = store(&mut history, name, fence);
                match accepted {
                    true => history.writes.0 += 1,
                    false => history.writes.1 += 1,
                }
            }
            let record = &mut history.sections[at];
            record.last_act = Some(now);
            record.valid = valid;
            if now >= valid {
                record.overran = true;
            }
        }
    }

    /// The guarded write of section `section`'s holder, if it makes one: an exclusive
    /// holder on a topology where one server decides (Redlock refuses guarded writes)
    /// reads the name's data key and puts its own mark there, in one call, only while it
    /// holds. The checker then asks that nobody else's mark came between two of its own.
    fn guarded_writes(&self, primitive: Primitive, section: usize) -> Option<Writes> {
        if !primitive.exclusive() || self.locker.quorum_settings().is_some() {
            return None;
        }
        let data = format!("data:{}", self.name());
        let mut writes = Writes::new();
        writes.add(redis::cmd("GET").arg(&data), [&data]).add(
            redis::cmd("SET")
                .arg(&data)
                .arg(section)
                .arg("PX")
                .arg(60_000),
            [&data],
        );
        Some(writes)
    }

    /// Makes the holder's guarded write (see [`Task::guarded_writes`]) through `write`
    /// (its lock's or lease's `write_if_held`), and records what became of it.
    async fn write_guarded<F, Fut>(&self, primitive: Primitive, section: usize, write: F)
    where
        F: FnOnce(Writes) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<redis::Value>, Error>>,
    {
        let Some(writes) = self.guarded_writes(primitive, section) else {
            return;
        };
        let sent = self.world.now();
        let outcome = write(writes).await;
        let answered = self.world.now();
        self.world
            .note(|| format!("t{}: guarded write: {outcome:?}", self.index));
        let (landed, found) = match outcome {
            Ok(replies) => {
                let found = match replies.first() {
                    Some(redis::Value::BulkString(mark)) => {
                        std::str::from_utf8(mark).ok().and_then(|m| m.parse().ok())
                    }
                    _ => None,
                };
                (true, found)
            }
            Err(e) if e.is_not_held() => (false, None),
            // Unknown (the network): whether it ran, nobody can say.
            Err(_) => return,
        };
        let name = self.name();
        self.world.history().guarded.push(GuardedWrite {
            section,
            name,
            sent,
            answered,
            landed,
            found,
        });
    }

    /// Runs `busy` (a request the holder makes) to its end, noting the moment the lease is
    /// told lost meanwhile: from then on the holder is not vouched for, whatever it is busy
    /// with — the library lets go of what is still held at once, in the background.
    async fn noting_loss(
        &self,
        section: usize,
        signal: &LostSignal,
        busy: impl std::future::Future<Output = ()>,
    ) {
        let mut busy = std::pin::pin!(busy);
        tokio::select! {
            biased;
            () = &mut busy => return,
            _ = signal.lost() => {
                let at = self.world.now();
                self.edit(section, |s| {
                    s.told_lost.get_or_insert(at);
                });
            }
        }
        busy.await;
    }

    /// The holder lets go now: from here on a rival may get in, whenever the release
    /// reaches the server — and whether or not the task lives to see its answer.
    fn releasing(&self, section: usize) -> Duration {
        let at = self.world.now();
        self.edit(section, |s| s.released = Some(at));
        at
    }

    fn released(&self, section: usize, at: Duration, outcome: &Result<(), Error>) {
        self.world.note(|| {
            format!(
                "t{}: released {} at {at:?}: {outcome:?}",
                self.index,
                self.name()
            )
        });
        self.edit(section, |s| {
            s.released = Some(at);
            s.release_held = match outcome {
                Ok(()) => Some(true),
                Err(e) if e.is_not_held() => Some(false),
                Err(_) => None,
            };
        });
    }

    /// Holds `lock` as `style` says, then lets it go.
    async fn section<P: Held>(
        &mut self,
        lock: Lock<SimConn, P>,
        primitive: Primitive,
        style: Style,
        asked: Duration,
        keep: Option<Duration>,
    ) {
        let section = self.open(primitive, style, asked);
        let valid = self.world.at(lock.valid_until());
        let fence = lock.fence_if_taken();
        self.edit(section, |s| {
            s.valid = valid;
            s.fence = fence;
            s.keep_until = keep.map(|keep| asked + keep);
        });
        self.world.note(|| {
            format!(
                "t{}: holds {} {} ({}), fence {fence:?}, valid until {valid:?}",
                self.index,
                primitive.name(),
                self.name(),
                style.name()
            )
        });
        let ttl = self.plan.ttl;
        match style {
            Style::Careful | Style::Periodic => {
                let acts = match style {
                    Style::Periodic => 1,
                    _ => 1 + self.rng.below(4),
                };
                let mut lock = lock;
                for _ in 0..acts {
                    if style == Style::Careful && self.rng.chance(0.2) {
                        self.refresh(section, &mut lock).await;
                    }
                    let gap = self.rng.between(Duration::ZERO, ttl / 2);
                    tokio::time::sleep(gap).await;
                    self.gate().await;
                    if tokio::time::Instant::now() >= lock.valid_until() {
                        break;
                    }
                    self.act(section, lock.valid_until(), fence);
                    let held = &lock;
                    (self.write_guarded(primitive, section, |w| async move {
                        held.write_if_held(&w).await
                    }))
                    .await;
                }
                let at = self.releasing(section);
                let outcome = lock.release().await;
                self.released(section, at, &outcome);
            }
            Style::Naive => {
                let work = self.rng.between(Duration::ZERO, ttl * 3 / 2);
                tokio::time::sleep(work).await;
                self.gate().await;
                self.act(section, lock.valid_until(), fence);
                // Late or not, as it writes with its fence: the server refuses it when
                // the lock is gone.
                let held = &lock;
                (self.write_guarded(primitive, section, |w| async move {
                    held.write_if_held(&w).await
                }))
                .await;
                let at = self.releasing(section);
                let outcome = lock.release().await;
                self.released(section, at, &outcome);
            }
            Style::Abandon => {
                let mut lock = lock;
                if self.rng.chance(0.5) {
                    self.refresh(section, &mut lock).await;
                }
                self.gate().await;
                if tokio::time::Instant::now() < lock.valid_until() {
                    self.act(section, lock.valid_until(), fence);
                }
                if self.rng.chance(1.0 / 3.0) {
                    // Dropped without a release (an early return, a panic unwinding): the
                    // guard releases it in the background — from now on it is not vouched
                    // for, and nobody waits for its TTL.
                    self.releasing(section);
                    drop(lock);
                    self.world
                        .note(|| format!("t{}: dropped its guard", self.index));
                    return;
                }
                // Neither renewed nor released: it runs out on its own.
                let _token = lock.detach();
            }
            Style::Lease => {
                let redlock = self.locker.quorum_settings().copied();
                if KeepAlive::new().check(ttl, redlock.as_ref()).is_err() {
                    let at = self.releasing(section);
                    let outcome = lock.release().await;
                    self.released(section, at, &outcome);
                    return;
                }
                self.edit(section, |s| s.renewed_with = Some(ttl));
                let lease = match lock.keep_alive() {
                    Ok(lease) => lease,
                    Err(e) => {
                        self.world.found("keep-alive", format!("refused: {e}"));
                        return;
                    }
                };
                let hold = self.rng.between(Duration::ZERO, ttl * 3);
                let until = tokio::time::Instant::now() + hold;
                let gap = (ttl / 4).max(Duration::from_millis(5));
                let mut heard = false;
                // A request is only a request (claim 14): a lease holder finishes
                // its hold first, three in four — so that what comes after a request (a forced release)
                // finds holders that were asked and still hold. (A bit of the task's seed,
                // not a draw: every other draw stays what it was.)
                let finishes_first = self.plan.seed.rotate_left(29) & 3 != 0;
                loop {
                    // Told "lost" at once, not at the next act: from then on it is not
                    // vouched for. Asked to let go, it lets go after this act (or after
                    // its hold).
                    let told = tokio::select! {
                        biased;
                        _ = lease.lost() => true,
                        () = lease.release_requested(), if !heard => {
                            heard = true;
                            let at = self.world.now();
                            self.edit(section, |s| s.heard_ask = Some(at));
                            self.world.note(|| format!("t{}: asked to let go", self.index));
                            false
                        }
                        () = tokio::time::sleep(gap) => false,
                    };
                    if told {
                        let at = self.world.now();
                        self.edit(section, |s| {
                            s.told_lost.get_or_insert(at);
                        });
                    }
                    self.gate().await;
                    let now = tokio::time::Instant::now();
                    if lease.is_lost() {
                        let at = self.world.now();
                        self.world.note(|| format!("t{}: told lost", self.index));
                        if now < lease.valid_until() {
                            self.world.found(
                                "lost-valid",
                                format!(
                                    "t{}'s lease of {} was told lost yet says it is valid until {:?}",
                                    self.index,
                                    self.name(),
                                    self.world.at(lease.valid_until())
                                ),
                            );
                        }
                        self.edit(section, |s| {
                            s.told_lost.get_or_insert(at);
                        });
                        break;
                    }
                    if now >= lease.valid_until() {
                        self.world.found(
                            "lost-late",
                            format!(
                                "t{}'s lease of {} is past its validity ({:?}) and was not told lost",
                                self.index,
                                self.name(),
                                self.world.at(lease.valid_until())
                            ),
                        );
                        break;
                    }
                    self.act(section, lease.valid_until(), fence);
                    let held = &lease;
                    let write = self.write_guarded(primitive, section, |w| async move {
                        held.write_if_held(&w).await
                    });
                    self.noting_loss(section, &lease.signal(), write).await;
                    if now >= until || (heard && !finishes_first) || self.over() {
                        break;
                    }
                }
                let at = self.releasing(section);
                let outcome = lease.release().await;
                self.released(section, at, &outcome);
            }
        }
    }

    /// Sets a new TTL, drawn as the acquire's was; the section's validity follows.
    async fn refresh<P: Held>(&mut self, section: usize, lock: &mut Lock<SimConn, P>) {
        let ttl = Duration::from_millis(self.rng.pick(&[50, 100, 300, 500, 1000, 2000]));
        let outcome = lock.refresh(ttl).await;
        let valid = self.world.at(lock.valid_until());
        self.world.note(|| {
            format!(
                "t{}: refreshed to {ttl:?}: {outcome:?}, valid until {valid:?}",
                self.index
            )
        });
        // (A refresh that failed may still have set a shorter TTL: the library then
        // shortens the validity all the same.)
        self.edit(section, |s| {
            s.shortened |= valid < s.valid;
            s.valid = valid;
        });
    }

    /// A writer: holds as any section does, or (now and then) downgrades to a reader and
    /// holds that.
    async fn writer(
        &mut self,
        lock: Lock<SimConn, redmutex::claim::WriteKey>,
        style: Style,
        asked: Duration,
        keep: Option<Duration>,
    ) {
        if style != Style::Careful || !self.rng.chance(0.3) {
            return self
                .section(lock, Primitive::Write, style, asked, keep)
                .await;
        }
        let section = self.open(Primitive::Write, style, asked);
        let (valid, fence) = (self.world.at(lock.valid_until()), lock.fence_if_taken());
        self.edit(section, |s| {
            s.valid = valid;
            s.fence = fence;
        });
        self.act(section, lock.valid_until(), fence);
        let at = self.releasing(section);
        match lock.downgrade().await {
            Ok(read) => {
                self.released(section, at, &Ok(()));
                self.world
                    .note(|| format!("t{}: downgraded to a reader", self.index));
                self.section(read, Primitive::Read, Style::Careful, at, None)
                    .await;
            }
            Err(e) => self.released(section, at, &Err(e)),
        }
    }

    /// A candidate: campaigns, leads as a kept-alive lease while not told "lost", resigns.
    async fn lead(&mut self, attempt: usize, asked: Duration) {
        let ttl = self.plan.ttl;
        let redlock = self.locker.quorum_settings().copied();
        let election = match self.locker.election(self.name()) {
            Ok(election) => election,
            Err(_) => return,
        };
        let election = match KeepAlive::new().check(ttl, redlock.as_ref()) {
            Ok(()) => election.with_ttl(ttl),
            Err(_) => election.with_ttl(Duration::from_secs(1)),
        };
        let Ok(election) = election else { return };
        let campaign = election
            .campaign(format!("t{}", self.index))
            .retry(retry::constant(self.plan.pause))
            .deadline(self.plan.deadline)
            .on_failed_try(self.failures(attempt));
        let got = self.obtain(campaign).await;
        self.end_attempt(attempt, &got);
        let Got::Held(mut leadership) = got else {
            return;
        };
        let section = self.open(Primitive::Leader, Style::Lease, asked);
        let term = leadership.term();
        let valid = self.world.at(leadership.valid_until());
        self.edit(section, |s| {
            s.fence = Some(term);
            s.valid = valid;
            s.renewed_with = Some(election.ttl());
        });
        self.world
            .note(|| format!("t{}: leads {} in term {term}", self.index, self.name()));
        let hold = self.rng.between(Duration::ZERO, election.ttl() * 3);
        let until = tokio::time::Instant::now() + hold;
        let gap = (election.ttl() / 4).max(Duration::from_millis(5));
        loop {
            let told = tokio::select! {
                biased;
                _ = leadership.lost() => true,
                () = tokio::time::sleep(gap) => false,
            };
            let at = self.world.now();
            if told {
                self.edit(section, |s| {
                    s.told_lost.get_or_insert(at);
                });
            }
            self.gate().await;
            let now = tokio::time::Instant::now();
            if leadership.is_lost() {
                self.edit(section, |s| {
                    s.told_lost.get_or_insert(at);
                });
                break;
            }
            if now >= leadership.valid_until() {
                self.world.found(
                    "lost-late",
                    format!(
                        "t{}'s leadership is past its validity, not told lost",
                        self.index
                    ),
                );
                break;
            }
            self.act(section, leadership.valid_until(), Some(term));
            if self.rng.chance(0.2) {
                let value = format!("t{}-{}", self.index, self.rng.below(100));
                let signal = leadership.signal();
                let proclaim = async {
                    let _ = leadership.proclaim(value).await;
                };
                self.noting_loss(section, &signal, proclaim).await;
            }
            if now >= until || self.over() {
                break;
            }
        }
        let at = self.releasing(section);
        let outcome = leadership.resign().await;
        self.released(section, at, &outcome);
    }

    /// Waits for the name to be free, without taking it.
    async fn watch(&mut self) {
        let timeout = self
            .rng
            .between(Duration::from_millis(10), self.plan.deadline);
        let asked = self.world.now();
        let answer = self.locker.wait_released(self.name(), timeout).await;
        let answered = self.world.now();
        self.world
            .note(|| format!("t{}: wait_released answered {answer:?}", self.index));
        if let Ok(free) = answer {
            self.world.history().watches.push(Watch {
                task: self.index,
                name: self.name(),
                asked,
                answered,
                free,
            });
        }
    }

    /// Follows the election until the run ends (or for a while, then again later),
    /// recording each change it is told of.
    async fn observe(&mut self) {
        let Ok(election) = self.locker.election(self.name()) else {
            return;
        };
        let Ok(election) = election.with_ttl(self.plan.ttl) else {
            return;
        };
        let until = (self.world.t0 + self.end).min(
            tokio::time::Instant::now()
                + self
                    .rng
                    .between(Duration::from_millis(100), Duration::from_secs(5)),
        );
        let mut changes = Box::pin(election.observe());
        loop {
            let since = self.world.now();
            // In a fixed order, as every choice in a run: a change due at the end is
            // seen (`select!` unbiased draws its order from outside the seed).
            let item = tokio::select! {
                biased;
                item = changes.next() => item,
                () = tokio::time::sleep_until(until) => return,
            };
            let Some(item) = item else { return };
            self.gate().await;
            let at = self.world.now();
            self.world
                .note(|| format!("t{}: observed {item:?}", self.index));
            if let Ok(leader) = item {
                self.world.history().observations.push(Observation {
                    task: self.index,
                    name: self.name(),
                    since,
                    at,
                    leader: leader.map(|l| (l.value, l.term)),
                });
            }
        }
    }

    /// An operator asks whoever holds the name to let go (`request_release`: a request,
    /// no excuse for any claim; a kept-alive holder that hears it lets go), or forces the
    /// release: with the lock-delay (`force_release`: a tombstone keeps everyone out until
    /// the holder's TTL ends — no excuse either), or at once (`force_release_now`, which
    /// breaks exclusion until the holder notices); a third of the time each.
    async fn force(&mut self) {
        let pause = self
            .rng
            .between(Duration::from_millis(200), Duration::from_secs(3));
        tokio::time::sleep(pause).await;
        self.gate().await;
        if self.over() {
            return;
        }
        if self.rng.chance(1.0 / 3.0) {
            return self.ask().await;
        }
        let at_once = self.rng.chance(0.5);
        let called = self.world.now();
        if !at_once {
            let taken = self.locker.force_release(self.name()).await;
            self.forced(called, &taken);
            self.world.note(|| {
                format!(
                    "t{}: forced the release of {} (lock-delay): {:?}",
                    self.index,
                    self.name(),
                    taken
                        .as_ref()
                        .map(|t| t.as_ref().map(|l| (l.kind, l.forced)))
                )
            });
            return;
        }
        // What held the name is no longer vouched for once the release ran: somewhere
        // between the call and its answer — or, unanswered (the task may not even live to
        // see it), whenever it reaches the server. Recorded before the call, open-ended,
        // and closed at the answer.
        let what = format!("t{} forcing a release", self.index);
        let open = self.end + crate::plan::SETTLE;
        let breach = breach_between(
            &self.world,
            called,
            open,
            Some(self.name().to_string()),
            what,
        );
        let taken = self.locker.force_release_now(self.name()).await;
        if taken.is_ok() {
            let now = self.world.now();
            self.world.history().breaches[breach].until = now;
        }
        self.forced(called, &taken);
        self.world.note(|| {
            format!(
                "t{}: forced the release of {} at once: {:?}",
                self.index,
                self.name(),
                taken.as_ref().map(|t| t.as_ref().map(|l| l.kind))
            )
        });
    }
}

impl Task {
    /// Records a forced release called at `called` that answered now, if it found the name
    /// held: its holders hold it no more.
    fn forced(&self, called: Duration, taken: &Result<Option<redmutex::state::ListedLock>, Error>) {
        if let Ok(Some(_)) = taken {
            let answered = self.world.now();
            self.world.history().forced.push(crate::history::Forced {
                task: self.index,
                name: self.name(),
                called,
                answered,
            });
        }
    }

    /// `request_release` of the name, recorded open-ended before the call (it may be
    /// stored whether or not the task lives to see the answer) and closed at the answer.
    async fn ask(&mut self) {
        let sent = self.world.now();
        let open = self.end + crate::plan::SETTLE;
        let index = {
            let mut history = self.world.history();
            history.asks.push(Ask {
                task: self.index,
                name: self.name(),
                sent,
                until: open,
            });
            history.asks.len() - 1
        };
        let asked = self.locker.request_release(self.name()).await;
        if asked.is_ok() {
            let now = self.world.now();
            self.world.history().asks[index].until = now;
        }
        self.world.note(|| {
            format!(
                "t{}: asked the holders of {} to let go: {:?}",
                self.index,
                self.name(),
                asked
                    .as_ref()
                    .map(|a| a.as_ref().map(|l| (l.kind, l.holder_count)))
            )
        });
    }
}

/// The fenced store of a name: accepts a write whose fence is at least the highest it
/// accepted.
fn store(history: &mut crate::history::History, name: &'static str, fence: u64) -> bool {
    match history.highest.iter_mut().find(|(n, _)| *n == name) {
        Some((_, highest)) if fence < *highest => false,
        Some((_, highest)) => {
            *highest = fence;
            true
        }
        None => {
            history.highest.push((name, fence));
            true
        }
    }
}
