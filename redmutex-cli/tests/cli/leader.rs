//! `redmutex leader`: who leads, once or as it changes (more in `elect`'s tests).

use std::process::Stdio;
use std::thread;

use testkit::RedisServer;

use crate::common::*;

/// `leader --watch` goes on through an outage shorter than --wait-redis even when nothing
/// changed meanwhile: the first read that works again is printed (the leader is known
/// again), and the watch does not end at --wait-redis after the outage began.
#[test]
fn a_leader_watch_goes_on_through_a_short_outage_without_a_change() {
    let server = RedisServer::spawn();
    let mut child = redmutex(&server)
        .args(["--wait-redis", "3s", "leader", "--watch", "svc"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    let said = lines_from(child.stderr.take().unwrap());
    assert_eq!(next_line(&lines), "none");
    server.kill();
    // Down until the watch has noticed (it asks every half second), however slow the
    // machine: an outage nobody saw has no end to show.
    let noticed = next_line(&said);
    assert!(noticed.contains("does not answer"), "{noticed}");
    server.restart();
    assert_eq!(next_line(&lines), "none", "read again after the outage");
    thread::sleep(ms(3_500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the watch outlived --wait-redis after a short outage"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
