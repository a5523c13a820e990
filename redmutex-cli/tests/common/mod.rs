//! What the CLI's integration tests share: running the real binary against a test-kit
//! server, and reading what it did.
#![allow(dead_code)] // each test program uses a different subset

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::RedisServer;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `redmutex --redis <server>` with a clean environment for the Redis variables.
pub fn redmutex(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
    cmd.arg("--redis").arg(server.url());
    cmd.env_remove("REDMUTEX_REDIS").env_remove("REDIS_URL");
    with_signals(&mut cmd, libc::SIG_DFL);
    cmd
}

/// The signals `exec` forwards (INT, TERM, HUP, QUIT) start out as `disposition` in the
/// child, whatever this test process inherited: a test run in the background of a
/// non-interactive shell inherits SIGINT ignored, and `exec` (by design) leaves a signal
/// ignored on entry ignored for its command too.
pub fn with_signals(cmd: &mut Command, disposition: libc::sighandler_t) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only `signal`, which is async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(sig, disposition);
            }
            Ok(())
        });
    }
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run redmutex")
}

pub fn code(output: &Output) -> i32 {
    output.status.code().expect("exited normally")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]) == ":1\r\n"
}

/// Waits until `key` exists on `server` (a process took it), failing after `within`.
pub fn until_exists(server: &RedisServer, key: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !exists(server, key) {
        assert!(Instant::now() < deadline, "{key} never held");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A scratch directory for files the commands write, removed with what it holds when
/// dropped (keep it alive as long as a command may write there).
pub fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("redmutex-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// See [`scratch`].
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn wait_for_file(path: &Path, within: Duration) -> String {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.is_empty()
        {
            return text;
        }
        thread::sleep(ms(20));
    }
    panic!("{path:?} was not written within {within:?}");
}

pub fn wait_child(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("redmutex did not exit within {within:?}");
        }
        thread::sleep(ms(20));
    }
}

/// Alive and not a zombie (an orphan killed here may wait a while for its reaper).
pub fn process_alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        // The state follows the command name in parentheses: "1234 (sleep) S ...".
        Ok(stat) => !stat.rsplit(") ").next().unwrap_or("").starts_with('Z'),
        Err(_) => false,
    }
}

/// The lines a child prints, as they come (its stdout taken), read on a thread of their own.
pub fn lines_of(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    lines_from(child.stdout.take().unwrap())
}

/// The lines read from `out` (a child's stdout or stderr), as they come, on a thread of
/// their own.
pub fn lines_from(mut out: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (send, lines) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut text = String::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
            while let Some(end) = text.find('\n') {
                let _ = send.send(text[..end].to_owned());
                text.drain(..=end);
            }
        }
    });
    lines
}

/// The next line from [`lines_of`], or a panic after 10 s.
pub fn next_line(lines: &std::sync::mpsc::Receiver<String>) -> String {
    lines
        .recv_timeout(Duration::from_secs(10))
        .expect("a line within 10 s")
}

/// The writing end of a pipe whose reading end is closed: a write to it fails (EPIPE).
pub fn unread_pipe() -> Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills in two new descriptors, owned from here on.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    Stdio::from(writer)
}

/// `redmutex` over Redlock: `--redis` repeated for each node, a clean environment for the
/// Redis variables.
pub fn redlock(servers: &[RedisServer]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
    for server in servers {
        cmd.arg("--redis").arg(server.url());
    }
    cmd.env_remove("REDMUTEX_REDIS").env_remove("REDIS_URL");
    cmd
}

/// Runs `args` over Redlock where the nodes that answer cannot decide about `job` (held on
/// one, free on another, the third frozen): with `--wait-redis 1s` it must exit 69 no
/// sooner than that; with 20 s, it must answer (exit 0) once the frozen node wakes, 3 s
/// on. Returns that answer.
pub fn undecided_key_waited_out(args: &[&str]) -> Output {
    let servers = RedisServer::spawn_many(3);
    let out = run(redlock(&servers).args(["acquire", "--ttl", "30s", "job"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(servers[1].command(&["DEL", "job"]), ":1\r\n");
    servers[2].pause();
    let started = Instant::now();
    let out = run(redlock(&servers).args(["--wait-redis", "1s"]).args(args));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "gave up at once"
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));

    let asked = redlock(&servers)
        .args(["--wait-redis", "20s"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // After the first round of PINGs (which waits for every node up to 2 s, then goes on
    // with the quorum that answered): the command itself must wait for the node.
    thread::sleep(Duration::from_millis(3_000));
    servers[2].resume();
    let out = asked.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    out
}

/// `redmutex` over several nodes, none of them listening (the servers were stopped), with a
/// short wait for them.
pub fn unreachable_redlock(servers: &[RedisServer]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redmutex"));
    for server in servers {
        cmd.arg("--redis").arg(server.url());
    }
    cmd.args(["--wait-redis", "500ms"]);
    cmd.env_remove("REDMUTEX_REDIS").env_remove("REDIS_URL");
    with_signals(&mut cmd, libc::SIG_DFL);
    cmd
}

/// `redmutex acquire` of `key`, returning its token.
pub fn acquire(server: &RedisServer, args: &[&str]) -> String {
    let out = run(redmutex(server).arg("acquire").args(args));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().to_owned()
}

/// The keys of a JSON object, nested ones included (`"name":`), each once, in the order
/// they first appear: enough to compare the shape of two outputs (whatever the length of
/// their arrays) without a JSON parser.
pub fn json_keys(line: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let key = &line[i + 1..j.min(line.len())];
            if bytes.get(j + 1) == Some(&b':') && !keys.iter().any(|k| k == key) {
                keys.push(key.to_owned());
            }
            i = j + 1;
        } else {
            i += 1;
        }
    }
    keys
}

/// What a finished child wrote on its piped stderr.
pub fn piped_stderr(child: &mut Child) -> String {
    let mut err = String::new();
    let pipe = child.stderr.as_mut().expect("stderr piped");
    pipe.read_to_string(&mut err).unwrap();
    err
}
