//! `redmutex-bench`: redmutex next to the raw Redis limit and the peer, measured in one run,
//! and how fairly each serves separate lockers that want one key (`fairness.rs`).
//!
//! Every workload runs three times on the same servers and the same kind of connection (one
//! multiplexed connection per node): the **baseline** (plain redis-rs sending exactly what a
//! lock must: `SET NX PX`, then an `EVALSHA` compare-and-delete), **rslock** (the most used
//! Rust Redlock crate) and **redmutex**. Each row reports its ratios to the other two.
//!
//! ```text
//! cargo run --release -p redmutex-bench            # private redis-servers, ~6 minutes
//! cargo run --release -p redmutex-bench -- --json  # one JSON object per row as well
//! ```

mod cluster_bus;
mod contender;
mod fairness;
mod herd;
mod sharing;
mod stats;
mod workload;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use redis::aio::MultiplexedConnection;
use redmutex::Locker;

use crate::contender::Contender;
use crate::workload::{Ratio, Row};

#[derive(Parser, Debug)]
#[command(
    name = "redmutex-bench",
    about = "redmutex against the raw Redis baseline and rslock"
)]
struct Args {
    /// Use this server for the single-node workloads instead of a private one; give it five
    /// times (five independent masters) to run the Redlock workloads on them too. Only
    /// keys under `bench:` are touched.
    #[arg(long = "redis", value_name = "URL")]
    redis: Vec<String>,

    /// How long each row runs, in seconds.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,

    /// How many times each throughput row is measured. The implementations take turns
    /// (baseline, rslock, redmutex, then backward: redmutex, rslock, baseline, …) so that
    /// drift of the machine hits them alike; the table shows each one's median round, and
    /// its ratios are the medians of the ratios within each round.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: u32,

    /// How many distinct keys the keyspace workload locks once each.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,

    /// How many leases the keep-alive workload holds.
    #[arg(long, default_value_t = 10_000)]
    leases: usize,

    /// How long the keep-alive workload holds them, in seconds.
    #[arg(long, default_value_t = 30.0)]
    hold: f64,

    /// How long each implementation runs in the fairness workload, in seconds.
    #[arg(long = "fairness-seconds", default_value_t = 20.0)]
    fairness_seconds: f64,

    /// Run only the workloads whose name contains this (uncontended, contended, polling,
    /// keyspace, redlock5, keepalive, fairness, read-mostly, permits, handover, wait, herd,
    /// cluster-bus).
    #[arg(long, value_name = "NAME")]
    only: Option<String>,

    /// Run only this implementation (baseline, rslock, redmutex, fenced, or woken in the
    /// polling and keepalive rows, fair, rwlock, semaphore and election in theirs), e.g. under
    /// a profiler.
    #[arg(long = "impl", value_name = "NAME")]
    implementation: Option<String>,

    /// Print one JSON object per row after the table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // One client thread: the other core is redis-server's.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redmutex-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let duration = Duration::from_secs_f64(args.seconds);
    let wanted = |name: &str| args.only.as_deref().is_none_or(|only| name.contains(only));
    let mut private = Vec::new();
    let single_url = match args.redis.first() {
        Some(url) => url.clone(),
        None => {
            private.push(testkit::RedisServer::spawn());
            private[0].url()
        }
    };
    let redlock_urls: Vec<String> = match args.redis.len() {
        0 => {
            let nodes = testkit::RedisServer::spawn_many(5);
            let urls = nodes.iter().map(testkit::RedisServer::url).collect();
            private.extend(nodes);
            urls
        }
        5 => args.redis.clone(),
        _ => Vec::new(),
    };
    print_setup(&single_url, &redlock_urls).await?;

    let mut rows: Vec<Row> = Vec::new();
    let chosen = |all: Vec<Arc<Contender>>| -> Vec<Arc<Contender>> {
        all.into_iter()
            .filter(|c| {
                args.implementation
                    .as_deref()
                    .is_none_or(|name| c.name() == name)
            })
            .collect()
    };
    let single = chosen(contenders(std::slice::from_ref(&single_url)).await?);
    for tasks in [1, 64] {
        let name = format!("uncontended C={tasks}");
        if wanted(&name) {
            rows.extend(
                medians(args.rounds, &single, |c| {
                    workload::uncontended(&name, c, tasks, duration, &single_url)
                })
                .await?,
            );
        }
    }
    if wanted("contended 16") {
        rows.extend(
            medians(args.rounds, &single, |c| {
                let waiting = workload::Waiting::Best;
                workload::contended("contended 16", c, 16, waiting, duration, &single_url)
            })
            .await?,
        );
    }
    rows.extend(single_node_extras(&args, &single, &single_url, duration).await?);
    if !redlock_urls.is_empty() {
        let five = chosen(contenders(&redlock_urls).await?);
        for tasks in [1, 64] {
            let name = format!("redlock5 C={tasks}");
            if wanted(&name) {
                rows.extend(
                    medians(args.rounds, &five, |c| {
                        workload::uncontended(&name, c, tasks, duration, &redlock_urls[0])
                    })
                    .await?,
                );
            }
        }
    }
    // The workloads of separate lockers (one per process in real life), each with the
    // implementations that have what it needs.
    let separate: [(&str, &[&str], usize); 5] = [
        ("fairness 8", &["baseline", "rslock", "redmutex", "fair"], 8),
        (
            "read-mostly 16",
            &["baseline", "rslock", "redmutex", "rwlock"],
            16,
        ),
        ("permits 16", &["baseline", "rslock", "semaphore"], 16),
        ("handover 8", &["baseline", "rslock", "election"], 8),
        ("wait 8", &["baseline", "rslock", "redmutex"], 9),
    ];
    for (workload, implementations, n) in separate {
        if !wanted(workload) {
            continue;
        }
        let duration = match workload {
            "fairness 8" => Duration::from_secs_f64(args.fairness_seconds),
            _ => duration,
        };
        let only = args.implementation.as_deref();
        for implementation in implementations {
            if only.is_some_and(|only| only != *implementation) {
                continue;
            }
            let lockers = fairness_lockers(implementation, n, &single_url).await?;
            rows.push(separate_lockers(workload, lockers, duration, &single_url).await?);
        }
    }
    // The herd: from 2 to 64 lockers on one key, each implementation that waits for one.
    for n in herd::SIZES {
        let workload = format!("herd {n}");
        if !wanted(&workload) {
            continue;
        }
        let all = [
            "baseline",
            "rslock",
            "redmutex",
            "fair",
            "semaphore",
            "rwlock",
        ];
        for implementation in all {
            if (args.implementation.as_deref()).is_some_and(|only| only != implementation) {
                continue;
            }
            let lockers = fairness_lockers(implementation, n, &single_url).await?;
            rows.push(herd::herd(&workload, lockers, duration, &single_url).await?);
        }
    }
    if wanted("cluster-bus") && (args.implementation.as_deref()).is_none_or(|i| i == "woken") {
        rows.push(cluster_bus::cluster_bus(duration).await?);
    }
    if wanted("keepalive") {
        // Plain, and with wake-up ("woken"): each kept-alive lease then listens for requests
        // to let go on its key's channel (a subscription per key held).
        let hold = Duration::from_secs_f64(args.hold);
        for implementation in ["redmutex", "woken"] {
            if (args.implementation.as_deref()).is_some_and(|only| only != implementation) {
                continue;
            }
            let mut locker = Locker::new(connect(&single_url).await?);
            if implementation == "woken" {
                let subscriber =
                    redis::Client::open(single_url.as_str()).map_err(|e| e.to_string())?;
                locker = locker
                    .with_wake_up([subscriber])
                    .map_err(|e| e.to_string())?;
            }
            let leases = args.leases;
            rows.push(
                workload::keep_alive(locker, implementation, leases, hold, &single_url).await?,
            );
        }
    }

    workload::fill_ratios(&mut rows);
    workload::print_table(&rows);
    if args.json {
        for row in &rows {
            println!("{}", row.json());
        }
    }
    drop(private);
    Ok(())
}

/// The single-node rows beside the throughput ones: the keyspace a run leaves, and polling.
async fn single_node_extras(
    args: &Args,
    single: &[Arc<Contender>],
    url: &str,
    duration: Duration,
) -> Result<Vec<Row>, String> {
    let wanted = |name: &str| args.only.as_deref().is_none_or(|only| name.contains(only));
    let mut rows = Vec::new();
    if wanted("keyspace") {
        for contender in single {
            rows.push(workload::keyspace(contender.clone(), args.keys, url).await?);
        }
    }
    if wanted("polling 16") {
        let implementation = args.implementation.clone();
        rows.extend(polling(
            url.to_owned(),
            args.rounds,
            duration,
            implementation,
        )?);
    }
    Ok(rows)
}

/// The polling workload: 16 tasks on a multi-thread runtime of its own (2 workers, as an
/// application's), one key, each waiting by polling with pauses drawn from [0, 10 ms) —
/// redmutex without wake-up, rslock with `set_retry(u32::MAX, 10ms)`, the baseline with the
/// same pauses — each over connections of its own made on that runtime.
fn polling(
    url: String,
    rounds: u32,
    duration: Duration,
    implementation: Option<String>,
) -> Result<Vec<Row>, String> {
    let run = move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let all = polling_contenders(&url).await?;
            let contenders: Vec<Arc<Contender>> = all
                .into_iter()
                .filter(|c| {
                    implementation
                        .as_deref()
                        .is_none_or(|name| c.name() == name)
                })
                .collect();
            medians(rounds, &contenders, |c| {
                let waiting = workload::Waiting::Polling;
                workload::contended("polling 16", c, 16, waiting, duration, &url)
            })
            .await
        })
    };
    std::thread::spawn(run)
        .join()
        .map_err(|_| "the polling workload's thread panicked".to_owned())?
}

/// The baseline, rslock retrying every [0, 10 ms) forever, redmutex without wake-up, and
/// redmutex with it (`woken`: the same pauses, only as the fallback).
async fn polling_contenders(url: &str) -> Result<Vec<Arc<Contender>>, String> {
    let mut rslock = rslock::LockManager::new(vec![url.to_owned()]);
    rslock.set_retry(u32::MAX, contender::POLL);
    Ok(vec![
        Arc::new(Contender::baseline(vec![connect(url).await?])),
        Arc::new(Contender::Rslock(rslock)),
        Arc::new(Contender::Redmutex {
            locker: Locker::new(connect(url).await?),
            name: "redmutex",
            fenced: false,
        }),
        // The same pauses as the fallback, and woken by the release.
        Arc::new(Contender::Redmutex {
            locker: Locker::new(connect(url).await?)
                .with_wake_up([redis::Client::open(url).map_err(|e| e.to_string())?])
                .map_err(|e| e.to_string())?,
            name: "woken",
            fenced: false,
        }),
    ])
}

/// Runs `workload`, one of the workloads of separate lockers.
async fn separate_lockers(
    workload: &str,
    lockers: Vec<Arc<Contender>>,
    duration: Duration,
    url: &str,
) -> Result<Row, String> {
    match workload {
        "fairness 8" => fairness::fairness(workload, lockers, duration, url).await,
        "read-mostly 16" => sharing::read_mostly(workload, lockers, duration, url).await,
        "permits 16" => sharing::permits(workload, lockers, duration, url).await,
        "wait 8" => sharing::wait_free(workload, lockers, duration, url).await,
        _ => sharing::handover(workload, lockers, duration, url).await,
    }
}

/// `n` lockers of one implementation for the workloads of separate lockers, each with connections
/// (and, for redmutex, a wake-up subscriber) of its own, as separate processes would have.
async fn fairness_lockers(
    implementation: &str,
    n: usize,
    url: &str,
) -> Result<Vec<Arc<Contender>>, String> {
    let mut lockers = Vec::new();
    for _ in 0..n {
        let waking = || -> Result<_, String> {
            let client = redis::Client::open(url).map_err(|e| e.to_string())?;
            Ok([client])
        };
        let contender = match implementation {
            "baseline" => Contender::baseline(vec![connect(url).await?]),
            "rslock" => Contender::Rslock(rslock::LockManager::new(vec![url.to_owned()])),
            "redmutex" => Contender::Redmutex {
                locker: (Locker::new(connect(url).await?).with_wake_up(waking()?))
                    .map_err(|e| e.to_string())?,
                name: "redmutex",
                fenced: false,
            },
            "rwlock" => Contender::Rw(
                (Locker::new(connect(url).await?).with_wake_up(waking()?))
                    .map_err(|e| e.to_string())?,
            ),
            "semaphore" => Contender::Semaphore(
                (Locker::new(connect(url).await?).with_wake_up(waking()?))
                    .map_err(|e| e.to_string())?,
            ),
            "election" => Contender::Election(
                (Locker::new(connect(url).await?).with_wake_up(waking()?))
                    .map_err(|e| e.to_string())?,
            ),
            _ => Contender::Fair(
                (Locker::new(connect(url).await?).with_wake_up(waking()?))
                    .map_err(|e| e.to_string())?,
            ),
        };
        lockers.push(Arc::new(contender));
    }
    Ok(lockers)
}

/// Measures one workload `rounds` times with the contenders taking turns — forward in
/// even rounds, backward in odd ones, so that each takes each place in the order alike —
/// and keeps each contender's median round by throughput (its notes say how far the
/// rounds spread). Its ratios to the baseline and rslock are the medians of the ratios
/// *within* each round (measured seconds apart), so that the machine's slow drift, which
/// moves all three alike, cancels out of them.
async fn medians<F, Fut>(
    rounds: u32,
    contenders: &[Arc<Contender>],
    mut measure: F,
) -> Result<Vec<Row>, String>
where
    F: FnMut(Arc<Contender>) -> Fut,
    Fut: std::future::Future<Output = Result<Row, String>>,
{
    let mut measured: Vec<Vec<Row>> = contenders.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for c in order {
            measured[c].push(measure(contenders[c].clone()).await?);
        }
    }
    let by_name = |name: &str| {
        measured
            .iter()
            .position(|rows| rows[0].implementation == name)
    };
    let (baseline, rslock) = (by_name("baseline"), by_name("rslock"));
    let paired: Vec<(Option<Ratio>, Option<Ratio>)> = (measured.iter())
        .map(|rows| {
            let against =
                |other: Option<usize>| other.map(|o| workload::paired(rows, &measured[o]));
            (against(baseline), against(rslock))
        })
        .collect();
    let rows = measured.into_iter().map(workload::median).zip(paired);
    let rows = rows.map(|(mut row, (vs_baseline, vs_rslock))| {
        (row.vs_baseline, row.vs_rslock) = (vs_baseline, vs_rslock);
        row
    });
    Ok(rows.collect())
}

async fn connect(url: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("{url}: {e}"))
}

/// The implementations over the same nodes, each with its own connections of the same
/// kind (one multiplexed connection per node): the baseline, rslock, redmutex as it comes
/// with no fence read (the same work as the other two) and redmutex taking every lock's
/// fence with its keys.
async fn contenders(urls: &[String]) -> Result<Vec<Arc<Contender>>, String> {
    let mut baseline = Vec::new();
    let mut ours = Vec::new();
    let mut fenced = Vec::new();
    let mut subscribers = Vec::new();
    for url in urls {
        baseline.push(connect(url).await?);
        ours.push(connect(url).await?);
        fenced.push(connect(url).await?);
        subscribers.push(redis::Client::open(url.as_str()).map_err(|e| e.to_string())?);
    }
    let locker = |conns: Vec<MultiplexedConnection>| -> Result<Locker<_>, String> {
        let locker = match <[_; 1]>::try_from(conns) {
            Ok([one]) => Locker::new(one),
            // The defaults: decided by the first quorum to agree.
            Err(many) => Locker::redlock(many).map_err(|e| e.to_string())?,
        };
        let locker = locker
            .with_wake_up(subscribers.clone())
            .map_err(|e| e.to_string())?;
        Ok(locker.with_prefix(""))
    };
    let rslock = rslock::LockManager::new(urls.to_vec());
    Ok(vec![
        Arc::new(Contender::baseline(baseline)),
        Arc::new(Contender::Rslock(rslock)),
        Arc::new(Contender::Redmutex {
            locker: locker(ours)?,
            name: "redmutex",
            fenced: false,
        }),
        Arc::new(Contender::Redmutex {
            locker: locker(fenced)?,
            name: "fenced",
            fenced: true,
        }),
    ])
}

async fn print_setup(single: &str, redlock: &[String]) -> Result<(), String> {
    let mut conn = connect(single).await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "redmutex-bench: redis {version} at {single}{}; {cores} cores; client: one tokio thread",
        if redlock.is_empty() {
            String::from(" (no Redlock nodes: give --redis five times)")
        } else {
            format!(" + {} Redlock nodes", redlock.len())
        }
    );
    Ok(())
}
