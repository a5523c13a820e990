//! The simulated network between a process and a node: a connection like redis-rs's
//! multiplexed one (requests in order, replies matched to them, a response timeout), over
//! which requests and replies take a drawn time to travel, can be cut before or after the
//! server applied them, wait while the node is frozen or the process paused, and fail
//! while the node is down or the process dead. A request that was sent arrives whether or
//! not its caller still waits for the reply, as over TCP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::state::{lock, Shared};
use testkit::Rng;

/// How long a request waits for its reply, as with `redmutex::connection::connect`.
pub const RESPONSE_TIMEOUT: Duration = redmutex::connection::RESPONSE_TIMEOUT;

/// One process's connection to one node (clones share it, as clones of a multiplexed
/// connection do).
#[derive(Clone)]
pub struct SimConn(Arc<Wire>);

struct Wire {
    world: Arc<Shared>,
    process: usize,
    node: usize,
    /// The task that carries requests in order, started on first use.
    queue: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    draws: Mutex<Draws>,
}

struct Draws {
    rng: Rng,
    /// When the last request reached the server: the next arrives no earlier.
    last_arrival: Instant,
    /// When the last reply reached the process: the next arrives no earlier.
    last_reply: Instant,
}

enum Request {
    One(Cmd),
    Many(Pipeline, usize, usize),
}

enum Answer {
    One(Value),
    Many(Vec<Value>),
}

struct Job {
    request: Request,
    sent: Instant,
    reply: oneshot::Sender<RedisResult<Answer>>,
}

fn io_error(kind: std::io::ErrorKind, text: &str) -> RedisError {
    std::io::Error::new(kind, text.to_string()).into()
}

impl SimConn {
    pub(crate) fn new(world: Arc<Shared>, process: usize, node: usize, seed: u64) -> SimConn {
        let t0 = world.t0;
        SimConn(Arc::new(Wire {
            world,
            process,
            node,
            queue: Mutex::new(None),
            draws: Mutex::new(Draws {
                rng: Rng::new(seed),
                last_arrival: t0,
                last_reply: t0,
            }),
        }))
    }

    async fn send(&self, request: Request) -> RedisResult<Answer> {
        let wire = &self.0;
        let process = &wire.world.processes[wire.process];
        if wire.world.is_closed() || process.is_crashed() {
            return Err(io_error(
                std::io::ErrorKind::BrokenPipe,
                "connection closed",
            ));
        }
        // A paused process sends nothing until it resumes.
        process.resumed().await;
        let (reply, answer) = oneshot::channel();
        let job = Job {
            request,
            sent: Instant::now(),
            reply,
        };
        if let Err(unsent) = wire.queue().send(job) {
            drop(unsent);
            return Err(io_error(
                std::io::ErrorKind::BrokenPipe,
                "connection closed",
            ));
        }
        match tokio::time::timeout(RESPONSE_TIMEOUT, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(io_error(
                std::io::ErrorKind::ConnectionReset,
                "connection reset",
            )),
            Err(_) => Err(io_error(
                std::io::ErrorKind::TimedOut,
                "no reply within the response timeout",
            )),
        }
    }
}

impl Wire {
    fn queue(self: &Arc<Self>) -> mpsc::UnboundedSender<Job> {
        let mut queue = lock(&self.queue);
        if let Some(sender) = queue.as_ref().filter(|s| !s.is_closed()) {
            return sender.clone();
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(self.clone().carry(receiver));
        *queue = Some(sender.clone());
        sender
    }

    /// Carries requests to the server one after the other, as a TCP connection does.
    async fn carry(self: Arc<Self>, mut jobs: mpsc::UnboundedReceiver<Job>) {
        while let Some(job) = jobs.recv().await {
            let arrival = {
                let mut draws = lock(&self.draws);
                let travel = self.travel(&mut draws.rng, job.sent);
                let at = (job.sent + travel).max(draws.last_arrival);
                draws.last_arrival = at;
                at
            };
            precise_sleep_until(arrival).await;
            let node = &self.world.nodes[self.node];
            // A frozen server runs what reached it once it thaws, in order.
            node.thawed().await;
            let outcome = self.apply(job.request).await;
            let reply_at = {
                let mut draws = lock(&self.draws);
                let now = Instant::now();
                let travel = self.travel(&mut draws.rng, now);
                let at = (now + travel).max(draws.last_reply);
                draws.last_reply = at;
                at
            };
            let process = self.world.processes[self.process].clone();
            tokio::spawn(async move {
                precise_sleep_until(reply_at).await;
                // A paused process hears its replies when it resumes.
                process.resumed().await;
                if !process.is_crashed() {
                    let _ = job.reply.send(outcome);
                }
            });
        }
    }

    /// How long one request or reply takes to travel, sent at `at`.
    fn travel(&self, rng: &mut Rng, at: Instant) -> Duration {
        let base = rng.between(Duration::ZERO, self.world.latency);
        base + self.world.processes[self.process].slowness(self.node, at)
    }

    /// The server's part: refused when down, cut before or after it applied the request.
    async fn apply(&self, request: Request) -> RedisResult<Answer> {
        let node = &self.world.nodes[self.node];
        let process = &self.world.processes[self.process];
        if !self.world.count_request() {
            return Err(io_error(
                std::io::ErrorKind::BrokenPipe,
                "the run was stopped",
            ));
        }
        if node.is_down() {
            return Err(io_error(std::io::ErrorKind::ConnectionRefused, "node down"));
        }
        let cut = process.take_cut(self.node);
        if cut.is_some() {
            let at = self.world.now();
            (self.world.history().cuts).push((at, self.process, self.node));
        }
        if cut == Some(false) {
            self.world
                .note(|| format!("p{}->n{}: cut before the server", self.process, self.node));
            return Err(io_error(std::io::ErrorKind::ConnectionReset, "cut"));
        }
        let mut redis = node.redis.clone();
        let answer = match request {
            Request::One(cmd) => {
                // `WAIT` is the replica's to answer, not the master's.
                let reply = match wait_timeout(&cmd) {
                    Some(timeout) => self.confirm(timeout).await,
                    None => redis.req_packed_command(&cmd).await,
                };
                self.world.note(|| {
                    format!(
                        "p{}->n{}: {} => {}",
                        self.process,
                        self.node,
                        describe_cmd(&cmd),
                        describe_reply(&reply)
                    )
                });
                reply.map(Answer::One)
            }
            Request::Many(pipeline, offset, count) => {
                let replies = redis.req_packed_commands(&pipeline, offset, count).await;
                self.world
                    .note(|| format!("p{}->n{}: pipeline", self.process, self.node));
                replies.map(Answer::Many)
            }
        };
        if cut == Some(true) {
            self.world.note(|| {
                format!(
                    "p{}->n{}: cut after the server applied it",
                    self.process, self.node
                )
            });
            return Err(io_error(std::io::ErrorKind::ConnectionReset, "cut"));
        }
        answer
    }
}

impl Wire {
    /// `WAIT 1 timeout`: how many replicas have every write this connection sent — the
    /// replica catches up as soon as it receives, and its acknowledgement travels back; 0
    /// once the timeout passed without.
    async fn confirm(&self, timeout: Duration) -> RedisResult<Value> {
        let node = &self.world.nodes[self.node];
        let Some(replica) = &node.replica else {
            return Err(io_error(
                std::io::ErrorKind::Unsupported,
                "ERR unknown command 'WAIT' (no replica)",
            ));
        };
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            let from = lock(replica).receives_from(now);
            if from > now {
                if now >= deadline {
                    return Ok(Value::Int(0));
                }
                tokio::time::sleep_until(from.min(deadline)).await;
                continue;
            }
            node.replicate();
            let back = {
                let mut draws = lock(&self.draws);
                draws.rng.between(Duration::ZERO, self.world.latency)
            };
            precise_sleep_until((now + back).min(deadline)).await;
            if node.is_down() {
                return Err(io_error(std::io::ErrorKind::ConnectionReset, "master died"));
            }
            return Ok(Value::Int(1));
        }
    }
}

/// The timeout of a `WAIT numreplicas timeout` command; `None` for any other.
fn wait_timeout(cmd: &Cmd) -> Option<Duration> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        redis::Arg::Simple(bytes) => bytes,
        _ => &[],
    });
    if !args.next()?.eq_ignore_ascii_case(b"WAIT") {
        return None;
    }
    let timeout = args.nth(1)?;
    let ms: u64 = std::str::from_utf8(timeout).ok()?.parse().ok()?;
    Some(Duration::from_millis(ms))
}

impl ConnectionLike for SimConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let request = Request::One(cmd.clone());
        Box::pin(async move {
            match self.send(request).await? {
                Answer::One(value) => Ok(value),
                Answer::Many(_) => Err(io_error(std::io::ErrorKind::InvalidData, "mixed up")),
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let request = Request::Many(pipeline.clone(), offset, count);
        Box::pin(async move {
            match self.send(request).await? {
                Answer::Many(values) => Ok(values),
                Answer::One(_) => Err(io_error(std::io::ErrorKind::InvalidData, "mixed up")),
            }
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// A command for a trace: its name, and for a script its first key and argument.
fn describe_cmd(cmd: &Cmd) -> String {
    let args: Vec<String> = (cmd.args_iter())
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => printable(bytes, 24),
            _ => "0".into(),
        })
        .collect();
    match args.first().map(|a| a.to_ascii_lowercase()).as_deref() {
        Some("evalsha") | Some("eval") => {
            let rest: Vec<&str> = args.iter().skip(2).map(String::as_str).take(5).collect();
            format!(
                "script {}… {}",
                &args[1][..args[1].len().min(8)],
                rest.join(" ")
            )
        }
        _ => args.join(" "),
    }
}

fn describe_reply(reply: &RedisResult<Value>) -> String {
    match reply {
        Ok(value) => printable(format!("{value:?}").as_bytes(), 60),
        Err(e) => format!("error {}", printable(e.to_string().as_bytes(), 60)),
    }
}

fn printable(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

/// Sleeps until `at` exactly. tokio's timer wakes sleepers on whole milliseconds only, so
/// every request and reply would otherwise land on a millisecond, and nothing in a run
/// would happen at a fraction of one — where a server that counts in whole milliseconds
/// differs from a client that does not. The paused clock is moved on by the fraction
/// left instead (every task sees time pass; timers due meanwhile fire).
pub(crate) async fn precise_sleep_until(at: Instant) {
    let now = Instant::now();
    if at <= now {
        return;
    }
    let tick = Duration::from_millis(1);
    if at - now > tick {
        // Fires at the first millisecond at or after `at - 1 ms`: before `at`.
        tokio::time::sleep_until(at - tick).await;
    }
    let now = Instant::now();
    if at > now {
        tokio::time::advance(at - now).await;
    }
}
