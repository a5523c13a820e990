//! The simulated world of one run: the servers (in-memory, each on a clock of its own
//! rate), the processes (each a locker of its own over its own connections, with or
//! without push wake-up), the faults as the plan strikes them, and the monitor that
//! samples what the servers hold while the run is quiet.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use redmutex::memory::MemoryRedis;
use redmutex::{Locker, Replication, WakeUpSource};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::history::{Free, History};
use crate::net::SimConn;
use crate::plan::{Fault, Plan, Primitive, Role, Topology};
use crate::state::{breach, breach_between, lock, NodeState, ProcState, Replica, Shared};
use crate::workload;
use testkit::Rng;

/// The servers' clocks start here (a fixed moment, so that runs do not depend on the day).
const EPOCH_SECS: u64 = 1_800_000_000;

/// How long the lockers of the replicated world wait for their replica to confirm a write.
pub(crate) const CONFIRM_TIMEOUT: Duration = Duration::from_millis(20);

/// What one run gave.
pub struct Outcome {
    /// What the tasks, faults and monitor recorded.
    pub history: History,
    /// The trace, when asked for: the plan, every request, fault and section.
    pub trace: Vec<String>,
    /// Requests the servers answered.
    pub requests: u64,
}

/// Runs `plan` in a fresh, paused-clock runtime on this thread; `trace` keeps a trace.
pub fn run(plan: &Plan, trace: bool) -> Outcome {
    let _deterministic = redmutex::simulation::deterministic(plan.seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(run_world(plan, trace))
}

async fn run_world(plan: &Plan, trace: bool) -> Outcome {
    let mut rng = Rng::new(plan.seed ^ 0xA11C_E5ED);
    let start = UNIX_EPOCH + Duration::from_secs(EPOCH_SECS);
    let world = Arc::new(Shared {
        t0: Instant::now(),
        latency: plan.latency,
        nodes: (plan.rates.iter())
            .map(|rate| {
                let redis = MemoryRedis::with_clock(start, *rate);
                let replica = match plan.topology {
                    Topology::Replicated { .. } => Some(Mutex::new(Replica {
                        data: redis.snapshot(),
                        behind_until: None,
                    })),
                    _ => None,
                };
                NodeState {
                    redis,
                    down_until: Mutex::new(None),
                    frozen_until: Mutex::new(None),
                    replica,
                }
            })
            .collect(),
        processes: (plan.processes.iter())
            .map(|_| {
                Arc::new(ProcState {
                    paused_until: Mutex::new(None),
                    crashed: AtomicBool::new(false),
                    slow: Mutex::new(Vec::new()),
                    cuts: Mutex::new(Vec::new()),
                })
            })
            .collect(),
        history: Mutex::new(History::default()),
        trace: trace.then(|| Mutex::new(plan.describe())),
        closed: AtomicBool::new(false),
        stopping: AtomicBool::new(false),
        instant: Mutex::new((Instant::now(), 0)),
        tasks: Mutex::new(plan.processes.iter().map(|_| Vec::new()).collect()),
    });
    let lockers: Vec<Locker<SimConn>> = (0..plan.processes.len())
        .map(|p| locker_of(&world, plan, p, &mut rng))
        .collect();
    for task in plan.tasks.iter() {
        let handle = tokio::spawn(workload::run(
            world.clone(),
            lockers[task.process].clone(),
            plan.processes[task.process].wake_up,
            task.id,
            task.clone(),
            plan.end(),
        ));
        lock(&world.tasks)[task.process].push(handle);
    }
    drop(lockers);
    let faults = tokio::spawn(strike_faults(world.clone(), plan.clone()));
    let replication = tokio::spawn(replicate(world.clone(), plan.replica_lag));
    let monitor = tokio::spawn(monitor(world.clone(), plan.clone()));
    tokio::time::sleep_until(world.t0 + plan.end()).await;
    world.stopping.store(true, Ordering::SeqCst);
    world.note(|| "the run ends: tasks finish what they hold".into());
    let handles: Vec<JoinHandle<()>> = lock(&world.tasks).drain(..).flatten().collect();
    for handle in handles {
        if let Err(e) = handle.await
            && e.is_panic()
        {
            world.found("panic", format!("a task panicked: {e}"));
        }
    }
    faults.abort();
    replication.abort();
    let _ = monitor.await;
    // What the tasks left (abandoned locks, waiters' places) runs out within a TTL and a
    // heartbeat; after that, only fence counters may remain.
    tokio::time::sleep(crate::plan::SETTLE).await;
    left_behind(&world);
    world.closed.store(true, Ordering::SeqCst);
    let requests = world.nodes.iter().map(|n| n.redis.requests()).sum();
    let history = std::mem::take(&mut *world.history());
    let trace = match &world.trace {
        Some(trace) => std::mem::take(&mut *lock(trace)),
        None => Vec::new(),
    };
    Outcome {
        history,
        trace,
        requests,
    }
}

/// A process's locker: its own connection to every node, and push wake-up if it has it.
fn locker_of(world: &Arc<Shared>, plan: &Plan, process: usize, rng: &mut Rng) -> Locker<SimConn> {
    let conns: Vec<SimConn> = (0..plan.topology.nodes())
        .map(|node| SimConn::new(world.clone(), process, node, rng.next_u64()))
        .collect();
    let one = |conns: Vec<SimConn>| Locker::new(conns.into_iter().next().expect("one node"));
    let locker = match plan.topology {
        Topology::Single | Topology::Replicated { confirmed: false } => one(conns),
        Topology::Replicated { confirmed: true } => one(conns)
            .with_replication(Replication::new(1, CONFIRM_TIMEOUT))
            .expect("one replica, a timeout within bounds"),
        Topology::Redlock(_) => Locker::redlock(conns).expect("an odd number of nodes"),
    };
    match plan.processes[process].wake_up {
        true => {
            let sources = (world.nodes.iter()).map(|node| WakeUpSource::from(&node.redis));
            locker.with_wake_up(sources).expect("one source per node")
        }
        false => locker,
    }
}

/// The replicas catch up with their masters every `lag` (never when it is zero).
async fn replicate(world: Arc<Shared>, lag: Duration) {
    if lag.is_zero() {
        return;
    }
    loop {
        tokio::time::sleep(lag).await;
        for node in &world.nodes {
            node.replicate();
        }
    }
}

/// Strikes the plan's faults at their moments.
async fn strike_faults(world: Arc<Shared>, plan: Plan) {
    let confirmed = matches!(plan.topology, Topology::Replicated { confirmed: true });
    let mut strikes = plan.faults.clone();
    strikes.sort_by_key(|s| s.at);
    for strike in strikes {
        tokio::time::sleep_until(world.t0 + strike.at).await;
        world.note(|| format!("FAULT {}", strike.fault));
        let now = Instant::now();
        match strike.fault {
            Fault::Slow {
                process,
                node,
                extra,
                lasting,
            } => lock(&world.processes[process].slow).push((node, now + lasting, extra)),
            Fault::Cut {
                process,
                node,
                applied,
            } => lock(&world.processes[process].cuts).push((node, applied)),
            Fault::Restart { node, down } => {
                // Unreachable until it is back, empty: the data goes at once (a timer
                // would let it answer into the millisecond it fires in).
                world.nodes[node].down_until(now + down);
                world.nodes[node].redis.restart_empty();
                breach(
                    &world,
                    None,
                    format!("n{node} restarts empty after {down:?}"),
                );
            }
            Fault::Down { node, lasting } => {
                let until = match lasting.is_zero() {
                    true => now + Duration::from_secs(86_400),
                    false => now + lasting,
                };
                world.nodes[node].down_until(until);
            }
            Fault::Freeze { node, lasting } => {
                let mut frozen = lock(&world.nodes[node].frozen_until);
                *frozen = Some(frozen.map_or(now + lasting, |f| f.max(now + lasting)));
            }
            Fault::Pause { process, lasting } => {
                let mut paused = lock(&world.processes[process].paused_until);
                *paused = Some(paused.map_or(now + lasting, |p| p.max(now + lasting)));
            }
            Fault::Crash { process } => {
                world.processes[process]
                    .crashed
                    .store(true, Ordering::SeqCst);
                for handle in lock(&world.tasks)[process].iter() {
                    handle.abort();
                }
            }
            Fault::Failover { down } => fail_over(&world, down, confirmed),
            Fault::ReplicaBehind { lasting } => {
                if let Some(replica) = &world.nodes[0].replica {
                    let mut replica = lock(replica);
                    replica.behind_until = Some(replica.receives_from(now).max(now + lasting));
                }
            }
            Fault::Evict { node, pick } => {
                let keys = world.nodes[node].redis.keys();
                if !keys.is_empty() {
                    let key = keys[(pick % keys.len() as u64) as usize].clone();
                    world.nodes[node].redis.expire_now(&key);
                    let key = String::from_utf8_lossy(&key).into_owned();
                    breach(
                        &world,
                        Some(key.clone()),
                        format!("n{node} evicted {key:?}"),
                    );
                }
            }
        }
    }
}

/// The master (node 0) dies now; after `down`, its replica answers in its place with what
/// it had received — the writes it had not are lost: a breach of the guarantees' conditions
/// unless the lockers waited for the replica to confirm each write. (The data is replaced
/// at once: nobody reaches the node meanwhile, and a timer would let the old data answer
/// into the millisecond it fires in.)
fn fail_over(world: &Shared, down: Duration, confirmed: bool) {
    let node = &world.nodes[0];
    let Some(replica) = &node.replica else {
        return;
    };
    node.down_until(Instant::now() + down);
    // What the replica has when its master dies is all it will have; the old master comes
    // back as the new one's replica, in sync with it.
    let data = lock(replica).data.clone();
    node.redis.fail_over(&data);
    let what = "n0 fails over to a replica that may have missed the last writes";
    match confirmed {
        false => {
            let index = breach_between(world, world.now(), world.now(), None, what.into());
            world.history().breaches[index].failover = true;
        }
        true => world.note(|| format!("{what} (every write it confirmed is there)")),
    }
}

/// Every key a server holds has a TTL: checked every 60 ms of the run. Also samples, every
/// 20 ms, what each name's holders leave free (for the liveness and hand-off rules).
async fn monitor(world: Arc<Shared>, plan: Plan) {
    let names: Vec<(&'static str, Vec<Primitive>)> = names_of(&plan);
    let mut tick = 0u64;
    loop {
        let now = world.now();
        if now >= plan.end() {
            return;
        }
        if tick.is_multiple_of(3) {
            every_key_has_a_ttl(&world).await;
        }
        {
            for (name, primitives) in &names {
                let free = free_now(&world, name, primitives).await;
                world.history().samples.push((now, name, free));
            }
        }
        tick += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The names the tasks work on, with the primitives used on each.
fn names_of(plan: &Plan) -> Vec<(&'static str, Vec<Primitive>)> {
    let mut names: Vec<(&'static str, Vec<Primitive>)> = Vec::new();
    for task in &plan.tasks {
        let primitive = match task.role {
            Role::Hold(primitive, _) => primitive,
            _ => continue,
        };
        for name in std::iter::once(task.name).chain(task.also) {
            match names.iter_mut().find(|(n, _)| *n == name) {
                Some((_, list)) if !list.contains(&primitive) => list.push(primitive),
                Some(_) => {}
                None => names.push((name, vec![primitive])),
            }
        }
    }
    names
}

async fn query<T: redis::FromRedisValue>(redis: &MemoryRedis, cmd: &redis::Cmd) -> Option<T> {
    cmd.query_async(&mut redis.clone()).await.ok()
}

async fn every_key_has_a_ttl(world: &Shared) {
    for (n, node) in world.nodes.iter().enumerate() {
        for key in node.redis.keys() {
            let pttl: Option<i64> = query(&node.redis, redis::cmd("PTTL").arg(&key)).await;
            if pttl == Some(-1) {
                let key = String::from_utf8_lossy(&key).into_owned();
                world.found("ttl", format!("n{n} holds {key:?} without a TTL"));
            }
        }
    }
}

/// What `name` leaves free now: per node, then over the quorum. A node nobody can reach
/// (down, or lost for good) leaves nothing free, whatever it holds: a waiter needs a quorum
/// of nodes it can reach (simulator seed 5443: a lost node's expired key and one node's
/// counted as a free quorum while the third still held it).
async fn free_now(world: &Shared, name: &str, primitives: &[Primitive]) -> Free {
    let mut counts = (0, 0, 0, 0);
    for node in world.nodes.iter().filter(|node| !node.is_down()) {
        let free = free_on(&node.redis, name, primitives).await;
        counts.0 += usize::from(free.exclusive);
        counts.1 += usize::from(free.read);
        counts.2 += usize::from(free.permit);
        counts.3 += usize::from(free.handed);
    }
    let needed = world.nodes.len() / 2 + 1;
    Free {
        exclusive: counts.0 >= needed,
        read: counts.1 >= needed,
        permit: counts.2 >= needed,
        handed: counts.3 >= needed,
    }
}

async fn free_on(redis: &MemoryRedis, name: &str, primitives: &[Primitive]) -> Free {
    let time: Vec<u64> = query(redis, &redis::cmd("TIME")).await.unwrap_or_default();
    let now_ms =
        time.first().copied().unwrap_or(0) * 1000 + time.get(1).copied().unwrap_or(0) / 1000;
    let kind: String = query(redis, redis::cmd("TYPE").arg(name))
        .await
        .unwrap_or_default();
    let live = |key: String| async move {
        let count: Option<u64> = query(
            redis,
            redis::cmd("ZCOUNT")
                .arg(key)
                .arg(format!("({now_ms}"))
                .arg("+inf"),
        )
        .await;
        count.unwrap_or(0)
    };
    let limit = primitives.iter().find_map(|p| match p {
        Primitive::Permit(limit) => Some(u64::from(*limit)),
        _ => None,
    });
    let holders = match kind.as_str() {
        "zset" => live(name.to_string()).await,
        _ => 0,
    };
    let intents = live(format!("{{{name}}}:intents")).await;
    // Lockers waiting in the key's line (plain locks, writers) keep new readers out as
    // intents do: their heartbeats are scored negated, live while -end <= -now.
    let in_line: u64 = query(
        redis,
        redis::cmd("ZCOUNT")
            .arg(format!("{{{name}}}:line"))
            .arg("-inf")
            .arg(format!("-{now_ms}")),
    )
    .await
    .unwrap_or(0);
    // A value of a locker's id and the flag HANDED alone (no metadata): a hand-off.
    let handed = match kind.as_str() {
        "string" => {
            let value: Option<Vec<u8>> = query(redis, redis::cmd("GET").arg(name)).await;
            value.is_some_and(|v| v.len() == redmutex::limits::TOKEN_LEN + 1 && v.ends_with(b"r"))
        }
        _ => false,
    };
    Free {
        handed,
        exclusive: kind == "none" || (kind == "zset" && holders == 0),
        read: kind != "string" && intents == 0 && in_line == 0,
        permit: match kind.as_str() {
            "none" => true,
            "zset" => holders < limit.unwrap_or(1),
            _ => false,
        },
    }
}

/// After the settling time, only fence counters may be left (and the data the holders'
/// guarded writes wrote, which is theirs, not the library's).
fn left_behind(world: &Shared) {
    for (n, node) in world.nodes.iter().enumerate() {
        for key in node.redis.keys() {
            let key = String::from_utf8_lossy(&key).into_owned();
            if !key.ends_with(":fence") && !key.starts_with("data:") {
                world.found("left-behind", format!("n{n} still holds {key:?}"));
            }
        }
    }
}
