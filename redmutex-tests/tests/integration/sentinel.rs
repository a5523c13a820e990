//! Redis Sentinel: one master, one replica, three sentinels from the test kit. A failover
//! while a lease is kept alive leaves it held on the new master (and nobody else can take
//! it) or reports it lost — never silently lost; new acquisitions work after it; a wrong
//! group name is a prompt error.

use std::time::Duration;

use crate::common::ms;
use redmutex::{retry, Locker};
use testkit::SentinelGroup;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_a_kept_alive_lease_keeps_it_or_reports_it_lost() {
    let group = SentinelGroup::spawn();
    let urls = group.sentinel_urls();
    let conn = redmutex::sentinel::connect(&urls, group.master_name())
        .await
        .unwrap();
    let locker = Locker::new(conn);
    let rival = Locker::new(
        redmutex::sentinel::connect(&urls, group.master_name())
            .await
            .unwrap(),
    );
    let lease = locker
        .acquire("nightly", ms(8_000))
        .await
        .unwrap()
        .keep_alive()
        .unwrap();
    let fence = lease.fence().await.unwrap();
    let old_master = group.master();
    let old_port = group.servers()[old_master].port();
    let replica = 1 - old_master;
    // The replica has the lock before its master dies.
    let until = tokio::time::Instant::now() + ms(3_000);
    while group.servers()[replica].command(&["EXISTS", "nightly"]) != ":1\r\n" {
        assert!(tokio::time::Instant::now() < until, "never replicated");
        tokio::time::sleep(ms(10)).await;
    }
    let renewals_before = lease.renewals();
    group.servers()[old_master].kill();

    // Through the failover and two TTLs after it, a rival tries every 250 ms; if it ever
    // gets the lock, the lease must have been told (or be told by its next renewal).
    let failover = tokio::task::spawn_blocking(move || {
        group.wait_for_failover_from(old_port);
        group
    });
    let until = tokio::time::Instant::now() + Duration::from_secs(16);
    let mut taken_over = false;
    while tokio::time::Instant::now() < until && !taken_over && !lease.is_lost() {
        tokio::time::sleep(ms(250)).await;
        if let Ok(taken) = rival.acquire("nightly", ms(2_000)).await {
            let until_known = tokio::time::Instant::now() + ms(8_000);
            while !lease.is_lost() {
                assert!(
                    tokio::time::Instant::now() < until_known,
                    "the rival holds the lock while the lease still says held"
                );
                tokio::time::sleep(ms(50)).await;
            }
            assert!(taken.fence().await.unwrap() > fence);
            taken.release().await.unwrap();
            taken_over = true;
        }
    }
    let group = failover.await.unwrap();
    let new_master = group.master();
    assert_ne!(new_master, old_master, "the replica was promoted");
    eprintln!(
        "lease after the failover: {} ({} renewals before, {} after)",
        if lease.is_lost() {
            "reported lost"
        } else {
            "kept"
        },
        renewals_before,
        lease.renewals()
    );
    if !lease.is_lost() {
        // Kept: renewed on the new master, which holds our token; nobody else gets it.
        assert!(
            lease.renewals() > renewals_before,
            "renewed after the failover"
        );
        let stored = group.servers()[new_master].command(&["GET", "nightly"]);
        assert!(stored.contains(lease.token().as_str()), "{stored}");
        assert!(rival
            .acquire("nightly", ms(2_000))
            .await
            .unwrap_err()
            .is_not_obtained());
        lease.release().await.unwrap();
    }
    // New acquisitions work, with fences that go on increasing (the counter replicated).
    let next = rival
        .acquire("nightly", ms(5_000))
        .retry(retry::constant(ms(100)))
        .deadline(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(next.fence().await.unwrap() > fence);
    next.release().await.unwrap();
    assert_eq!(
        group.servers()[new_master].command(&["EXISTS", "nightly"]),
        ":0\r\n"
    );
}

#[tokio::test]
async fn an_unknown_group_name_is_a_prompt_error() {
    let group = SentinelGroup::spawn();
    let started = std::time::Instant::now();
    let error = redmutex::sentinel::connect(&group.sentinel_urls(), "no-such-group")
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(error, redmutex::Error::Redis(_)), "{error:?}");
}
