//! Redlock's acquire and release decided by the first quorum to agree, with the requests
//! to the slower nodes heard on a task (`backend/fan_out.rs`): several lockers hammering a
//! key while nodes are paused and slowed.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{every_node_empties, ms};
use redis::aio::ConnectionManager;
use redmutex::retry::{self, Jitter, RetryExt};
use redmutex::{Error, Locker, QuorumSettings};
use testkit::{Proxy, RedisServer};
use tokio::time::Instant;

fn redlock_over<S: AsRef<str>>(urls: &[S], node_timeout: Duration) -> Locker<ConnectionManager> {
    let conns = urls
        .iter()
        .map(|url| redmutex::connection::connect_lazy(url.as_ref()).unwrap());
    Locker::redlock(conns).unwrap().with_quorum_settings(
        (QuorumSettings::new().node_timeout(node_timeout)).wait_for_every_node(false),
    )
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

async fn warm(locker: &Locker<ConnectionManager>) {
    locker
        .acquire("warm", ms(5000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Overlap checker: a holder's validity interval [acquired, valid_until) and whether it
/// released; a new holder must not start before a previous unreleased holder's validity ends.
#[derive(Default)]
struct Ledger {
    /// (id, valid_until, released_at)
    holders: Vec<(u64, Instant, Option<Instant>)>,
    overlaps: Vec<String>,
}

impl Ledger {
    fn acquired(&mut self, id: u64, now: Instant, valid_until: Instant) -> usize {
        for (other, until, released) in &self.holders {
            let ended = match released {
                Some(r) => (*r).min(*until),
                None => *until,
            };
            if ended > now {
                self.overlaps.push(format!(
                    "holder {id} acquired while {other} valid for {:?} more (released: {})",
                    ended - now,
                    released.is_some()
                ));
            }
        }
        self.holders.push((id, valid_until, None));
        self.holders.len() - 1
    }
    fn released(&mut self, index: usize, at: Instant) {
        self.holders[index].2 = Some(at);
    }
}

/// Four lockers (each its own connections), twelve tasks, one key on five nodes, while one
/// node is paused and resumed and another slowed: no holder may start while another is
/// still valid and unreleased, and once everyone released, nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockers_hammering_a_key_with_a_paused_and_a_slow_node_never_overlap_nor_leave_keys() {
    let servers = RedisServer::spawn_many(5);
    let proxy = Proxy::start(servers[3].addr());
    let mut node_urls = urls(&servers);
    node_urls[3] = proxy.url();
    let lockers: Vec<_> = (0..4).map(|_| redlock_over(&node_urls, ms(400))).collect();
    for locker in &lockers {
        warm(locker).await;
    }
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let acquired = Arc::new(AtomicUsize::new(0));
    let next_id = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..12u64 {
        let locker = lockers[task as usize % lockers.len()].clone();
        let (ledger, stop, acquired, next_id) = (
            ledger.clone(),
            stop.clone(),
            acquired.clone(),
            next_id.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut round = 0u64;
            while !stop.load(Ordering::SeqCst) {
                round += 1;
                let lock = match locker
                    .acquire("k", ms(10_000))
                    .retry(retry::exponential(ms(1), ms(20)).jitter(Jitter::full()))
                    .deadline(ms(3_000))
                    .await
                {
                    Ok(lock) => lock,
                    Err(e) if e.is_not_obtained() => continue,
                    Err(Error::NoQuorum(_)) => continue,
                    Err(e) => panic!("task {task}: {e:?}"),
                };
                let id = next_id.fetch_add(1, Ordering::SeqCst);
                let index = ledger
                    .lock()
                    .unwrap()
                    .acquired(id, Instant::now(), lock.valid_until());
                tokio::time::sleep(ms(round % 3)).await;
                acquired.fetch_add(1, Ordering::SeqCst);
                // Mark released before the release is sent (conservative).
                ledger.lock().unwrap().released(index, Instant::now());
                match round % 3 {
                    0 => {
                        let _ = lock.release().await;
                    }
                    1 => drop(lock),
                    _ => {
                        let token = lock.detach();
                        let _ = locker.release_with_token(["k"], &token).await;
                    }
                }
            }
        }));
    }
    // Chaos: node 4 paused/resumed, node 3's latency toggled.
    for cycle in 0..12u64 {
        if cycle % 2 == 0 {
            servers[4].pause();
        }
        proxy.set_latency(ms([0, 30, 5, 60][cycle as usize % 4]));
        tokio::time::sleep(ms(250)).await;
        servers[4].resume();
        tokio::time::sleep(ms(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    servers[4].resume();
    proxy.set_latency(ms(0));
    for task in tasks {
        task.await.unwrap();
    }
    let overlaps = std::mem::take(&mut ledger.lock().unwrap().overlaps);
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    assert!(acquired.load(Ordering::SeqCst) > 20);
    every_node_empties(&servers).await;
}
