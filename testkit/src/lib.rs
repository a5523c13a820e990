//! Throwaway `redis-server` processes for redmutex's tests, examples and demo.
//!
//! Every server runs on a free loopback port with persistence off, in a private temporary
//! directory, and is killed when its [`RedisServer`] is dropped. Only processes this crate
//! started are ever signalled.
//!
//! ```no_run
//! let server = testkit::RedisServer::spawn();
//! println!("redis at {}", server.url());
//! server.pause(); // SIGSTOP: the node stops answering but keeps its connections
//! server.resume();
//! server.restart(); // same port, empty data set (no persistence)
//! ```
//!
//! [`Proxy`] puts a TCP proxy in front of a server for network faults: latency, a black
//! hole, cut connections.
//!
//! The binary is `redis-server` from `PATH`, or the path in `REDMUTEX_REDIS_SERVER`.
//! A missing binary or a server that does not start is a loud panic that names the
//! problem and prints the tail of the server's log: tests fail, they never skip.

mod cluster;
mod proxy;
mod rng;
mod sentinel;
mod tls;

pub use cluster::{ClusterNode, RedisCluster};
pub use proxy::Proxy;
pub use rng::Rng;
pub use sentinel::{SentinelGroup, MASTER_NAME};
pub use tls::TestCa;

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// How long a fresh server may take to answer its first PING.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many fresh ports to try when another process grabs the one we picked.
const PORT_ATTEMPTS: u32 = 5;

/// Options for a server: extra `redis-server` arguments such as a password.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// `--requirepass`: clients must authenticate with this password.
    pub password: Option<String>,
    /// Further raw arguments, e.g. `["--maxmemory", "10mb"]`, or an ACL user, one word per
    /// argument: `["--user", "locker", "on", ">secret", "~app:*", "+get"]` (a single
    /// `"locker on >secret …"` argument would be read as one word).
    pub extra_args: Vec<String>,
    /// Also listen for TLS (on [`RedisServer::tls_url`]) with a certificate from a CA made
    /// for this server ([`RedisServer::tls_ca`]); the plain port stays open for the test's
    /// own look at the data.
    pub tls: bool,
    /// A configuration file's contents, written to the server's directory and given as its
    /// first argument (e.g. a sentinel's `sentinel monitor …`; a sentinel rewrites it).
    pub config: Option<String>,
}

/// One `redis-server` process on `127.0.0.1`, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// The TLS port, for a server started with [`ServerOptions::tls`].
    tls_port: Option<u16>,
    dir: PathBuf,
    options: ServerOptions,
    state: Mutex<ProcessState>,
}

#[derive(Debug)]
struct ProcessState {
    child: Option<Child>,
    paused: bool,
}

impl RedisServer {
    /// Starts a server with default options and waits until it answers.
    ///
    /// # Panics
    /// When `redis-server` is missing or does not start; the message includes its log tail.
    pub fn spawn() -> RedisServer {
        Self::spawn_with(ServerOptions::default())
    }

    /// Starts a server with `options` and waits until it answers.
    ///
    /// # Panics
    /// As [`RedisServer::spawn`].
    pub fn spawn_with(options: ServerOptions) -> RedisServer {
        let mut last_failure = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let dir = scratch_dir(port);
            let mut server = RedisServer {
                port,
                tls_port: options.tls.then(free_port),
                dir,
                options: options.clone(),
                state: Mutex::new(ProcessState {
                    child: None,
                    paused: false,
                }),
            };
            match server.start() {
                Ok(()) => return server,
                Err(failure) => {
                    // Most likely the port was taken between probing and binding: try another.
                    last_failure = failure;
                    server.stop();
                }
            }
        }
        panic!("redis-server did not start after {PORT_ATTEMPTS} attempts: {last_failure}");
    }

    /// Starts `n` independent servers (e.g. five Redlock nodes).
    pub fn spawn_many(n: usize) -> Vec<RedisServer> {
        (0..n).map(|_| Self::spawn()).collect()
    }

    /// Starts a replica of this server, with `extra_args` (e.g. `--appendonly yes`), and
    /// waits until it is in sync.
    ///
    /// # Panics
    /// As [`RedisServer::spawn`], or when it does not sync within 10 s.
    pub fn spawn_replica(&self, extra_args: &[&str]) -> RedisServer {
        let port = self.port.to_string();
        // The first sync at once, not after the default 5 s wait for more replicas.
        self.command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
        let replica = RedisServer::spawn_with(ServerOptions {
            extra_args: ["--replicaof", "127.0.0.1", &port]
                .iter()
                .chain(extra_args)
                .map(|arg| arg.to_string())
                .collect(),
            ..ServerOptions::default()
        });
        let until = Instant::now() + Duration::from_secs(10);
        // Synced as the replica sees it, and online as the primary does (it counts a replica
        // for WAIT only from its first acknowledgement).
        let synced = || {
            replica
                .command(&["INFO", "replication"])
                .contains("master_link_status:up")
                && self
                    .command(&["INFO", "replication"])
                    .contains("state=online")
        };
        while !synced() {
            assert!(
                Instant::now() < until,
                "the replica did not sync within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // After a full sync the primary streams to the replica only from its first
        // acknowledgement (sent once a second): until then WAIT counts it out.
        let key = "testkit:replica-sync";
        loop {
            let replies =
                self.commands(&[&["SET", key, "1"], &["DEL", key], &["WAIT", "1", "100"]]);
            if replies[2] != ":0\r\n" {
                break;
            }
            assert!(
                Instant::now() < until,
                "the replica did not acknowledge within 10 s"
            );
        }
        replica
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's socket address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `redis://127.0.0.1:PORT` (with the password, if the server has one).
    pub fn url(&self) -> String {
        match &self.options.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// `rediss://127.0.0.1:TLS_PORT` (with the password, if any) for a server started with
    /// [`ServerOptions::tls`].
    ///
    /// # Panics
    /// For a server without TLS.
    pub fn tls_url(&self) -> String {
        let port = self
            .tls_port
            .expect("a server started with ServerOptions::tls");
        match &self.options.password {
            Some(password) => format!("rediss://:{password}@127.0.0.1:{port}"),
            None => format!("rediss://127.0.0.1:{port}"),
        }
    }

    /// The PEM file of the CA that signed this TLS server's certificate.
    ///
    /// # Panics
    /// For a server without TLS.
    pub fn tls_ca(&self) -> PathBuf {
        assert!(
            self.tls_port.is_some(),
            "a server started with ServerOptions::tls"
        );
        self.dir.join("tls").join("ca.crt")
    }

    /// The OS process id of the running server, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.lock_state().child.as_ref().map(Child::id)
    }

    /// Kills the server (SIGKILL) and waits for it to exit. Its data is gone.
    pub fn kill(&self) {
        let mut state = self.lock_state();
        if let Some(mut child) = state.child.take() {
            if state.paused {
                signal(&child, libc::SIGCONT);
                state.paused = false;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it runs, then starts it again on the same port with an empty
    /// data set (persistence is off), and waits until it answers.
    ///
    /// # Panics
    /// When the server does not come back (e.g. the port was taken meanwhile).
    pub fn restart(&self) {
        self.kill();
        if let Err(failure) = self.start() {
            panic!(
                "redis-server did not restart on port {}: {failure}",
                self.port
            );
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open but nothing is answered.
    pub fn pause(&self) {
        let mut state = self.lock_state();
        if let Some(child) = &state.child {
            signal(child, libc::SIGSTOP);
            state.paused = true;
        }
    }

    /// Thaws a server frozen by [`RedisServer::pause`] (SIGCONT).
    pub fn resume(&self) {
        let mut state = self.lock_state();
        if let Some(child) = &state.child {
            signal(child, libc::SIGCONT);
            state.paused = false;
        }
    }

    /// Sends one command (as arguments) over a fresh connection and returns the raw RESP
    /// reply, e.g. `server.command(&["DBSIZE"])` → `":0\r\n"`. Handy in tests that must
    /// look at the server without going through the code under test.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn command(&self, args: &[&str]) -> String {
        self.commands(&[args]).pop().expect("one reply")
    }

    /// Sends several commands, in order, over one fresh connection (e.g. `ASKING` before a
    /// read on a cluster node importing a slot) and returns their raw replies.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub fn commands(&self, commands: &[&[&str]]) -> Vec<String> {
        self.try_commands(commands)
            .unwrap_or_else(|e| panic!("test redis-server on port {}: {e}", self.port))
    }

    /// [`RedisServer::commands`], failing instead of panicking.
    fn try_commands(&self, commands: &[&[&str]]) -> std::io::Result<Vec<String>> {
        let mut stream = TcpStream::connect(self.addr())?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut request = Vec::new();
        let authenticated = usize::from(self.options.password.is_some());
        if let Some(password) = &self.options.password {
            request.extend_from_slice(&encode_command(&["AUTH", password]));
        }
        for args in commands {
            request.extend_from_slice(&encode_command(args));
        }
        stream.write_all(&request)?;
        let mut replies = read_replies(&mut stream, authenticated + commands.len())?;
        Ok(replies.split_off(authenticated))
    }

    /// The process id of the server answering on this server's port, when it says.
    fn answering_pid(&self) -> Option<u32> {
        let info = self.try_commands(&[&["INFO", "server"]]).ok()?.pop()?;
        info.lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
    }

    /// The last lines of the server's log file.
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir.join("redis.log"))
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, ProcessState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn start(&self) -> Result<(), String> {
        fs::create_dir_all(&self.dir).map_err(|e| format!("cannot create {:?}: {e}", self.dir))?;
        let binary = server_binary();
        let log = self.dir.join("redis.log");
        let mut command = Command::new(&binary);
        if let Some(config) = &self.options.config {
            let path = self.dir.join("redis.conf");
            if !path.exists() {
                fs::write(&path, config).map_err(|e| format!("cannot write {path:?}: {e}"))?;
            }
            command.arg(path);
        }
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log);
        if let Some(password) = &self.options.password {
            command.args(["--requirepass", password]);
        }
        if let Some(tls_port) = self.tls_port {
            let dir = self.dir.join("tls");
            let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
            if !cert.exists() {
                TestCa::generate(&dir, "ca").issue_server(&dir);
            }
            command
                .arg("--tls-port")
                .arg(tls_port.to_string())
                .arg("--tls-cert-file")
                .arg(&cert)
                .arg("--tls-key-file")
                .arg(&key)
                .arg("--tls-ca-cert-file")
                .arg(dir.join("ca.crt"))
                .args(["--tls-auth-clients", "no"]);
        }
        command.args(&self.options.extra_args);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| {
            format!(
                "cannot run {binary:?}: {e}. Install it (Debian: apt-get install redis-server) \
                 or point REDMUTEX_REDIS_SERVER at the binary"
            )
        })?;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return Err(format!(
                    "redis-server on port {} exited with {status}; stderr: {stderr}; log tail:\n{}",
                    self.port,
                    log_tail(&log)
                ));
            }
            if ping(self.addr()) {
                // A server that failed to bind the port answers nothing, but another
                // server that holds the port does: make sure it is this one.
                match self.answering_pid() {
                    Some(pid) if pid != child.id() => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(format!(
                            "port {} is answered by another server (pid {pid})",
                            self.port
                        ));
                    }
                    _ => break,
                }
            }
            if started.elapsed() > STARTUP_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "redis-server on port {} did not answer within {STARTUP_TIMEOUT:?}; log tail:\n{}",
                    self.port,
                    log_tail(&log)
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
        let mut state = self.lock_state();
        state.child = Some(child);
        state.paused = false;
        Ok(())
    }

    fn stop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `--user` and the words of `rule` (`"locker on >pw ~app:* +get"`), one per argument, for
/// [`ServerOptions::extra_args`]: an ACL user as the server's command line takes it (one
/// argument holding the whole rule would be read as one word).
pub fn acl_user(rule: &str) -> Vec<String> {
    std::iter::once("--user".to_owned())
        .chain(rule.split_whitespace().map(str::to_owned))
        .collect()
}

/// The server binary the test kit starts: `$REDMUTEX_REDIS_SERVER` (e.g. a `valkey-server`
/// or an older `redis-server`), else `redis-server` from `PATH`.
pub fn server_binary() -> std::ffi::OsString {
    std::env::var_os("REDMUTEX_REDIS_SERVER").unwrap_or_else(|| "redis-server".into())
}

/// A capability the server under test lacks, for a test of it: the test is skipped, with
/// `reason` printed — unless `$REDMUTEX_REQUIRE` (comma-separated: `tls`, `waitaof`) names
/// the capability, and then this panics. The full test command (`scripts/test.sh`) names
/// what each server it runs against has, so that a test there cannot pass by checking
/// nothing; a plain `cargo test` against whatever `redis-server` is installed skips.
pub fn lacks(capability: &str, reason: &str) {
    let required = std::env::var("REDMUTEX_REQUIRE").unwrap_or_default();
    if required.split(',').any(|name| name.trim() == capability) {
        panic!("REDMUTEX_REQUIRE names {capability}, but {reason}");
    }
    eprintln!("skipped: {reason}");
}

/// Whether [`server_binary`] was built with TLS: `Err` with the reason when not (tests of
/// TLS print it and skip). Found by asking the binary for a TLS port without a certificate:
/// a build with TLS complains about the certificate, one without about TLS itself.
pub fn tls_support() -> Result<(), String> {
    static SUPPORT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    SUPPORT
        .get_or_init(|| {
            let binary = server_binary();
            let output = Command::new(&binary)
                .args(["--port", "0", "--tls-port", "1", "--save", ""])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {binary:?}: {e}"))?;
            let text = String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr);
            if text.contains("Bad directive") || text.contains("TLS support") {
                Err(format!("{binary:?} was built without TLS"))
            } else {
                Ok(())
            }
        })
        .clone()
}

/// A loopback port nothing listens on, for a server to bind (or for a test that needs an
/// address where nothing answers). Another process may take it before the server binds it;
/// [`RedisServer::spawn_with`] then retries with a new one.
///
/// Ports come from below the OS's range for outgoing connections, so that no client
/// socket holds one, and each is handed out once while this process lives — to no other
/// test process either (test programs run side by side, e.g. against two servers): a port
/// a test killed its server on is not given to another test's server, which the first
/// test's clients would reach when they reconnect.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if let Some((low, high)) = ports_for_servers() {
        let span = u32::from(high - low);
        // Processes side by side start at different places in the range.
        let start = std::process::id().wrapping_mul(7919) % span;
        for _ in 0..span {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = low + u16::try_from((start + n) % span).expect("within the range");
            if reserve(port) && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("bind an ephemeral loopback port")
}

/// Reserves `port` for this process's lifetime among the processes that use this kit: an
/// exclusive `flock` on a file named after it, which the OS lets go of when the process
/// ends, however it ends (the file itself stays, empty, for the next run to lock).
fn reserve(port: u16) -> bool {
    use std::os::fd::AsRawFd;
    static HELD: Mutex<Vec<fs::File>> = Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("redmutex-testkit-ports");
    if fs::create_dir_all(&dir).is_err() {
        // Nowhere to keep reservations: the bind check alone decides.
        return true;
    }
    let Ok(file) = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))
    else {
        return true;
    };
    // SAFETY: `flock` on a descriptor this function owns; it touches no memory.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if locked {
        HELD.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(file);
    }
    locked
}

/// The ports from 10000 up to the start of the OS's ephemeral range, when that range
/// leaves room below it (Linux's default starts at 32768).
fn ports_for_servers() -> Option<(u16, u16)> {
    const LOW: u16 = 10_000;
    let range = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let first: u16 = range.split_whitespace().next()?.parse().ok()?;
    (first >= LOW + 1_000).then_some((LOW, first))
}

fn scratch_dir(port: u16) -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "redmutex-testkit-{}-{n}-{port}",
        std::process::id()
    ))
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    // SAFETY: plain kill(2) on a child we spawned and have not reaped yet, so the pid
    // cannot have been reused by another process.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// True when something at `addr` answers a RESP PING with a reply (`+PONG`, or an error such
/// as `-NOAUTH` from a password-protected server: either way the server is up).
fn ping(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut first = [0u8; 1];
    // `-LOADING` means not ready yet.
    let mut rest = [0u8; 7];
    match stream.read_exact(&mut first) {
        Ok(()) if first[0] == b'+' => true,
        Ok(()) if first[0] == b'-' => {
            stream.read_exact(&mut rest).is_ok() && !rest.starts_with(b"LOADING")
        }
        _ => false,
    }
}

fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads `count` complete RESP2 replies and returns each as its raw text.
fn read_replies(stream: &mut TcpStream, count: usize) -> std::io::Result<Vec<String>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(replies) = split_replies(&buffer, count) {
            return Ok(replies);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

fn split_replies(buffer: &[u8], count: usize) -> Option<Vec<String>> {
    let mut replies = Vec::with_capacity(count);
    let mut at = 0;
    for _ in 0..count {
        let end = reply_end(buffer, at)?;
        replies.push(String::from_utf8_lossy(&buffer[at..end]).into_owned());
        at = end;
    }
    Some(replies)
}

/// The index just past the RESP2 reply that starts at `at`, if the buffer holds all of it.
fn reply_end(buffer: &[u8], at: usize) -> Option<usize> {
    let line_end = at + buffer.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let header = std::str::from_utf8(&buffer[at + 1..line_end]).ok()?;
    let after_line = line_end + 2;
    match buffer[at] {
        b'$' => {
            let len: i64 = header.parse().ok()?;
            if len < 0 {
                return Some(after_line);
            }
            let end = after_line + usize::try_from(len).ok()? + 2;
            (buffer.len() >= end).then_some(end)
        }
        b'*' => {
            let len: i64 = header.parse().ok()?;
            let mut end = after_line;
            for _ in 0..len.max(0) {
                end = reply_end(buffer, end)?;
            }
            Some(end)
        }
        _ => Some(after_line),
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|e| format!("(no log at {path:?}: {e})"));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_nested_replies() {
        let raw = b"+OK\r\n*2\r\n$3\r\nabc\r\n:5\r\n$-1\r\n";
        let replies = split_replies(raw, 3).unwrap();
        assert_eq!(
            replies,
            vec!["+OK\r\n", "*2\r\n$3\r\nabc\r\n:5\r\n", "$-1\r\n"]
        );
        assert!(split_replies(b"$5\r\nab", 1).is_none());
    }

    #[test]
    fn spawn_command_kill_restart() {
        let server = RedisServer::spawn();
        assert_eq!(server.command(&["PING"]), "+PONG\r\n");
        assert_eq!(server.command(&["SET", "k", "v"]), "+OK\r\n");
        server.restart();
        assert_eq!(
            server.command(&["EXISTS", "k"]),
            ":0\r\n",
            "restart must lose the data"
        );
        server.kill();
        assert!(!ping(server.addr()));
    }

    #[test]
    fn password_protected_server() {
        let server = RedisServer::spawn_with(ServerOptions {
            password: Some("s3cret".into()),
            ..ServerOptions::default()
        });
        assert!(server.url().contains(":s3cret@"));
        assert_eq!(server.command(&["PING"]), "+PONG\r\n");
    }

    #[test]
    fn many_independent_nodes() {
        let nodes = RedisServer::spawn_many(3);
        let mut ports: Vec<u16> = nodes.iter().map(RedisServer::port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 3);
        nodes[0].command(&["SET", "only-here", "1"]);
        assert_eq!(nodes[1].command(&["EXISTS", "only-here"]), ":0\r\n");
        nodes[1].kill();
        assert_eq!(
            nodes[2].command(&["PING"]),
            "+PONG\r\n",
            "killing one leaves the others"
        );
    }

    #[test]
    fn free_ports_are_never_handed_out_twice_nor_from_the_ephemeral_range() {
        let ports: Vec<u16> = (0..500).map(|_| free_port()).collect();
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len());
        if let Some((low, high)) = ports_for_servers() {
            assert!(ports.iter().all(|port| (low..high).contains(port)));
        }
    }

    #[test]
    fn a_reserved_port_is_not_reserved_again() {
        let port = free_port();
        if ports_for_servers().is_some() {
            // A second reservation (as another process's would be: `flock` conflicts
            // between open files, in one process or two) is refused.
            assert!(!reserve(port));
        }
    }

    #[test]
    fn a_server_whose_port_another_server_answers_is_not_taken_for_started() {
        let taken = RedisServer::spawn();
        // A live server that listens on no TCP port at all (`--port 0` comes last and
        // wins), started on `taken`'s port: only `taken` answers there.
        let options = ServerOptions {
            extra_args: vec!["--port".into(), "0".into()],
            ..ServerOptions::default()
        };
        let mut impostor = RedisServer {
            port: taken.port(),
            tls_port: None,
            dir: scratch_dir(taken.port()),
            options,
            state: Mutex::new(ProcessState {
                child: None,
                paused: false,
            }),
        };
        let failure = impostor.start().unwrap_err();
        assert!(failure.contains("answered by another server"), "{failure}");
        assert!(impostor.pid().is_none(), "its process is not kept");
        impostor.stop();
        assert_eq!(taken.command(&["PING"]), "+PONG\r\n");
    }

    #[test]
    fn pause_and_resume() {
        let server = RedisServer::spawn();
        server.pause();
        assert!(!ping(server.addr()), "a paused server must not answer");
        server.resume();
        assert!(ping(server.addr()));
    }
}
