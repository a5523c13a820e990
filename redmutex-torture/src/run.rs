//! The coordinator: starts private servers for one mode, the worker processes and the
//! guarded resource's server, injects the fault schedule, then hands what the workers
//! recorded to the checker and counts the keys left behind.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::{Proxy, RedisCluster, RedisServer, SentinelGroup, ServerOptions};

use crate::checker::{check, Verdict};
use crate::clock::now_ns;
use crate::record::{Ask, Section};
use crate::schedule::{schedule, Fault, FaultKind, Mode, Plan};
use crate::worker::PREFIX;

/// A locker's heartbeat in a plain lock's line, as docs/SAFETY.md (9) states it: the line
/// expires that long after its latest join, whatever the locks' TTL.
const LINE_HEARTBEAT: Duration = Duration::from_secs(3);

/// The coordinator's command line.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Modes to run, one after the other (repeat the flag; default: all five).
    #[arg(long = "mode", value_enum)]
    pub modes: Vec<Mode>,
    /// How long the workers run, per mode, in seconds.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// The seed of the fault schedule and of every worker's choices (default: drawn, and
    /// printed so that the run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    pub processes: u32,
    /// Tasks per worker process.
    #[arg(long, default_value_t = 8)]
    pub tasks: u32,
    /// Keys to contend for.
    #[arg(long, default_value_t = 4)]
    pub keys: u32,
    /// Lock TTL in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub ttl_ms: u64,
    /// Inject no faults (a baseline).
    #[arg(long)]
    pub no_faults: bool,
    /// One JSON object per mode instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// For the checker's own test: see the worker's flag of the same name.
    #[arg(long, hide = true)]
    pub sabotage_validity: bool,
}

/// One mode's results.
#[derive(Debug)]
pub struct Report {
    /// The topology.
    pub mode: Mode,
    /// The seed.
    pub seed: u64,
    /// The run's settings.
    pub args: RunArgs,
    /// Faults injected, by kind, in kind order.
    pub faults: Vec<(FaultKind, usize)>,
    /// The checker's findings.
    pub verdict: Verdict,
    /// Failed acquires: not obtained in time, transient errors, other errors.
    pub not_obtained: u64,
    /// See `not_obtained`.
    pub transient_errors: u64,
    /// See `not_obtained`.
    pub other_errors: u64,
    /// Holders that lost their lock before they asked for its fence (none handed out).
    pub no_fence: u64,
    /// How many lock keys Redis held right after the workers exited.
    pub leftover_at_exit: usize,
    /// The lock keys still there when each should have gone: a TTL + 1 s after the
    /// workers exited, a plain lock's line a locker's heartbeat in it (3 s) + 1 s.
    pub leftover_keys: Vec<String>,
    /// Keys without an expiry, lock keys or fence counters (never acceptable).
    pub keys_without_ttl: usize,
    /// Workers that crashed or reported a fatal error, with what they said.
    pub worker_failures: Vec<String>,
    /// Other errors the workers saw, verbatim (a few).
    pub error_messages: Vec<String>,
}

impl Report {
    /// Whether the guarantee held and nothing was lost or left behind.
    pub fn passed(&self) -> bool {
        let guarantee = match self.mode.loses_writes() {
            true => self.verdict.upheld_apart_from_lost_writes(),
            false => self.verdict.upheld(),
        };
        guarantee
            && self.verdict.sections > 0
            && self.other_errors == 0
            && self.leftover_keys.is_empty()
            && self.keys_without_ttl == 0
            && self.worker_failures.is_empty()
    }
}

/// The servers of one mode and how to reach and hurt them.
enum Topology {
    Nodes {
        nodes: Vec<RedisServer>,
        proxies: Vec<Proxy>,
    },
    Cluster(RedisCluster),
    Sentinel(SentinelGroup),
}

impl Topology {
    fn start(mode: Mode) -> Topology {
        match mode {
            Mode::Single => {
                // Kill/restart is only survivable with the data on disk before each reply.
                let node = RedisServer::spawn_with(ServerOptions {
                    extra_args: ["--appendonly", "yes", "--appendfsync", "always"]
                        .map(String::from)
                        .to_vec(),
                    ..ServerOptions::default()
                });
                let proxies = vec![Proxy::start(node.addr())];
                Topology::Nodes {
                    nodes: vec![node],
                    proxies,
                }
            }
            Mode::Redlock => {
                let nodes = RedisServer::spawn_many(5);
                let proxies = nodes.iter().map(|n| Proxy::start(n.addr())).collect();
                Topology::Nodes { nodes, proxies }
            }
            // No automatic failover: a replica promoted over a master that is restarting
            // could miss the last locks (asynchronous replication), which is a limit of
            // the deployment (docs/SAFETY.md), not what this run checks. A restarted
            // master reloads its append-only file and takes its slots back.
            Mode::Cluster => Topology::Cluster(RedisCluster::spawn_with(&[
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--cluster-replica-no-failover",
                "yes",
            ])),
            Mode::Sentinel | Mode::SentinelConfirmed => Topology::Sentinel(SentinelGroup::spawn()),
        }
    }

    fn nodes(&self) -> &[RedisServer] {
        match self {
            Topology::Nodes { nodes, .. } => nodes,
            Topology::Cluster(cluster) => cluster.nodes(),
            Topology::Sentinel(group) => group.servers(),
        }
    }

    /// What workers connect to: the proxies, or the cluster's nodes.
    fn urls(&self) -> Vec<String> {
        match self {
            Topology::Nodes { proxies, .. } => proxies.iter().map(Proxy::url).collect(),
            Topology::Cluster(cluster) => cluster.urls(),
            Topology::Sentinel(group) => group.sentinel_urls(),
        }
    }

    fn inject(&self, fault: &Fault, workers: &[Child]) {
        let node = || &self.nodes()[fault.target];
        let proxy = || match self {
            Topology::Nodes { proxies, .. } => &proxies[fault.target],
            _ => unreachable!("the schedule has proxy faults only where there are proxies"),
        };
        match fault.kind {
            FaultKind::Cut => proxy().cut(),
            FaultKind::Latency => {
                proxy().set_latency(fault.latency);
                thread::sleep(fault.lasts);
                proxy().set_latency(Duration::ZERO);
            }
            FaultKind::NodePause => {
                node().pause();
                thread::sleep(fault.lasts);
                node().resume();
            }
            FaultKind::NodeRestart => {
                node().kill();
                thread::sleep(fault.lasts);
                node().restart();
            }
            FaultKind::HolderPause => {
                let pid = workers[fault.target].id() as libc::pid_t;
                // SAFETY: plain signals to a child process we started and still own.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                thread::sleep(fault.lasts);
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
            FaultKind::ClientKill => {
                let node = match self {
                    // The node that takes the clients' requests now.
                    Topology::Sentinel(group) => &group.servers()[group.master()],
                    _ => node(),
                };
                node.command(&["CLIENT", "KILL", "TYPE", "normal"]);
                node.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
            }
            FaultKind::Failover => match self {
                Topology::Sentinel(group) => fail_over(group, fault.lasts),
                _ => unreachable!("the schedule fails over only a Sentinel group"),
            },
        }
    }

    /// Lock keys on the servers now (names, deduplicated: replicas hold copies), and how
    /// many keys of any kind (lock keys, fence counters) have no expiry.
    fn lock_keys(&self) -> (BTreeSet<String>, usize) {
        let mut names = BTreeSet::new();
        let mut without_ttl = BTreeSet::new();
        for node in self.nodes() {
            if node.pid().is_none() {
                continue;
            }
            // Every key the library wrote — lock keys and fence counters — has a TTL.
            for key in bulk_strings(&node.command(&["KEYS", "*"])) {
                if node.command(&["PTTL", &key]).trim() == ":-1" {
                    without_ttl.insert(key.clone());
                }
                // Lock keys, and what lives beside them but fence counters (which are kept
                // for their retention period by design): fair locks' queues.
                let beside = key.starts_with(&format!("{{{PREFIX}")) && !key.ends_with(":fence");
                if key.starts_with(PREFIX) || beside {
                    names.insert(key);
                }
            }
        }
        (names, without_ttl.len())
    }

    /// The lock keys left once each has had its time to go after the workers exited at
    /// `exited`: a TTL for a lock's keys (fair queues included, their heartbeat being the
    /// TTL), and for a plain lock's line the heartbeat of a locker in it, which does not
    /// follow the TTL (SAFETY.md 9: a line expires a heartbeat after its latest join).
    /// One second more for each, for the server's expiry cycle and this check's requests.
    fn keys_left_behind(&self, exited: Instant, ttl: Duration) -> (Vec<String>, usize) {
        let sleep_until = |at: Instant| thread::sleep(at.saturating_duration_since(Instant::now()));
        sleep_until(exited + ttl + Duration::from_secs(1));
        let (names, without_ttl) = self.lock_keys();
        let is_line = |name: &String| name.ends_with(":line");
        let mut left: Vec<String> = names.iter().filter(|n| !is_line(n)).cloned().collect();
        if names.iter().any(is_line) {
            sleep_until(exited + ttl.max(LINE_HEARTBEAT) + Duration::from_secs(1));
            left.extend(self.lock_keys().0.into_iter().filter(is_line));
        }
        (left, without_ttl)
    }
}

/// A failover that loses writes: the replica stops receiving (frozen, its link cut by the
/// master) while the master takes the workers' writes for `missed`; the master is killed
/// (no persistence: what only it had is gone); Sentinel promotes the replica; the old
/// master comes back empty and becomes the new one's replica, in sync before the next
/// fault.
fn fail_over(group: &SentinelGroup, missed: Duration) {
    let master = group.master();
    let (old, replica) = (&group.servers()[master], &group.servers()[1 - master]);
    replica.pause();
    old.command(&["CLIENT", "KILL", "TYPE", "replica"]);
    thread::sleep(missed);
    old.kill();
    replica.resume();
    group.wait_for_failover_from(old.port());
    old.restart();
    group.resync_replica();
}

/// The elements of a RESP array of bulk strings (as `RedisServer::command` returns it).
fn bulk_strings(resp: &str) -> Vec<String> {
    let mut lines = resp.split("\r\n");
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        if line.starts_with('$')
            && line != "$-1"
            && let Some(value) = lines.next()
        {
            out.push(value.to_string());
        }
    }
    out
}

/// Runs one mode and reports.
pub fn run_mode(mode: Mode, seed: u64, args: &RunArgs) -> Report {
    let topology = Topology::start(mode);
    let storage = RedisServer::spawn();
    let ttl = Duration::from_millis(args.ttl_ms);
    let run = Duration::from_secs(args.seconds);
    let plan = Plan {
        mode,
        nodes: topology.nodes().len(),
        workers: args.processes as usize,
        ttl,
        run,
    };
    let faults = if args.no_faults {
        Vec::new()
    } else {
        schedule(seed, &plan)
    };
    // Time for every worker to start and connect before the clock starts.
    let start_at = now_ns() + 2_000_000_000;
    let stop_at = start_at + run.as_nanos() as u64;
    let exe = std::env::current_exe().expect("the torture binary's own path");
    let urls = topology.urls();
    let mut workers: Vec<Child> = Vec::new();
    let mut readers = Vec::new();
    for id in 0..args.processes {
        let mut command = Command::new(&exe);
        command
            .arg("worker")
            .args(["--id", &id.to_string(), "--mode", mode.name()])
            .args(["--storage", &storage.url()])
            .args(["--keys", &args.keys.to_string()])
            .args(["--tasks", &args.tasks.to_string()])
            .args(["--ttl-ms", &args.ttl_ms.to_string()])
            .args(["--start-at", &start_at.to_string()])
            .args(["--stop-at", &stop_at.to_string()])
            .args(["--seed", &seed.to_string()]);
        for url in &urls {
            command.args(["--url", url]);
        }
        // (Through Sentinel, waiters poll: a subscriber would stay on the old master.)
        if id % 2 == 0 && !mode.is_sentinel() {
            command.arg("--wake-up");
        }
        if args.sabotage_validity {
            command.arg("--sabotage-validity");
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a worker process");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        // Read while it runs: a full pipe would stall the worker.
        readers.push(thread::spawn(move || {
            let lines: Vec<String> = BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut err);
            (lines, err)
        }));
        workers.push(child);
    }
    let mut injected: Vec<FaultKind> = Vec::new();
    for fault in &faults {
        let due = start_at + fault.at.as_nanos() as u64;
        thread::sleep(Duration::from_nanos(due.saturating_sub(now_ns())));
        topology.inject(fault, &workers);
        injected.push(fault.kind);
    }
    // Workers finish the section in hand after the stop time: allow a few TTLs.
    let give_up = stop_at + 30_000_000_000;
    let mut worker_failures = Vec::new();
    for (id, child) in workers.iter_mut().enumerate() {
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    worker_failures.push(format!("worker {id} exited with {status}"));
                    break;
                }
                Ok(None) if now_ns() > give_up => {
                    let _ = child.kill();
                    let _ = child.wait();
                    worker_failures.push(format!("worker {id} did not stop; killed"));
                    break;
                }
                Ok(None) => thread::sleep(Duration::from_millis(50)),
                Err(e) => {
                    worker_failures.push(format!("worker {id}: {e}"));
                    break;
                }
            }
        }
    }
    let exited = Instant::now();
    let leftover_at_exit = topology.lock_keys().0.len();
    let mut sections = Vec::new();
    let mut asks = Vec::new();
    let mut report_tally = [0u64; 4];
    let mut error_messages = Vec::new();
    for (id, reader) in readers.into_iter().enumerate() {
        let (lines, stderr) = reader.join().expect("reader thread");
        for line in lines {
            if line.starts_with("section ") {
                match line.parse::<Section>() {
                    Ok(section) => sections.push(section),
                    Err(e) => worker_failures.push(format!("worker {id}: {e}")),
                }
            } else if line.starts_with("ask ") {
                match line.parse::<Ask>() {
                    Ok(ask) => asks.push(ask),
                    Err(e) => worker_failures.push(format!("worker {id}: {e}")),
                }
            } else if let Some(counts) = line.strip_prefix("tally ") {
                for (i, field) in counts.split(' ').enumerate().take(4) {
                    let n = field.split_once('=').and_then(|(_, n)| n.parse().ok());
                    report_tally[i] += n.unwrap_or(0);
                }
            } else if let Some(message) = line.strip_prefix("error ") {
                error_messages.push(format!("worker {id}: {message}"));
            } else {
                worker_failures.push(format!("worker {id}: {line}"));
            }
        }
        if !stderr.trim().is_empty() {
            worker_failures.push(format!("worker {id} stderr: {}", stderr.trim()));
        }
    }
    let (leftover_keys, keys_without_ttl) = topology.keys_left_behind(exited, ttl);
    let verdict = check(&sections, &asks);
    let mut faults_by_kind: Vec<(FaultKind, usize)> = mode
        .fault_kinds()
        .iter()
        .map(|kind| (*kind, injected.iter().filter(|k| *k == kind).count()))
        .collect();
    faults_by_kind.sort();
    Report {
        mode,
        seed,
        args: args.clone(),
        faults: faults_by_kind,
        verdict,
        not_obtained: report_tally[0],
        transient_errors: report_tally[1],
        other_errors: report_tally[2],
        no_fence: report_tally[3],
        leftover_at_exit,
        leftover_keys,
        keys_without_ttl,
        worker_failures,
        error_messages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_arrays_of_bulk_strings() {
        assert_eq!(
            bulk_strings("*2\r\n$10\r\ntorture:k1\r\n$10\r\ntorture:k2\r\n"),
            ["torture:k1", "torture:k2"]
        );
        assert!(bulk_strings("*0\r\n").is_empty());
    }
}
