//! A TCP proxy in front of a server, for network faults: added latency, a black hole
//! (bytes vanish, connections stay open), and cut connections. Loopback only.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Forwards `127.0.0.1:<port>` to an upstream address until dropped.
///
/// ```no_run
/// let server = testkit::RedisServer::spawn();
/// let proxy = testkit::Proxy::start(server.addr());
/// // connect clients to proxy.url() instead of server.url()
/// proxy.set_latency(std::time::Duration::from_millis(50)); // each way
/// proxy.blackhole(true);  // bytes are swallowed; connections stay open
/// proxy.blackhole(false);
/// proxy.cut();            // close every open connection now
/// ```
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
}

struct State {
    upstream: SocketAddr,
    latency: Mutex<Duration>,
    blackhole: AtomicBool,
    refuse: AtomicBool,
    stopped: AtomicBool,
    /// Both sockets of every open connection, to cut them.
    open: Mutex<Vec<TcpStream>>,
}

impl Proxy {
    /// Starts forwarding to `upstream`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind proxy port");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(State {
            upstream,
            latency: Mutex::new(Duration::ZERO),
            blackhole: AtomicBool::new(false),
            refuse: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accept_state = state.clone();
        thread::spawn(move || accept_loop(listener, accept_state));
        Proxy { addr, state }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.addr.port())
    }

    /// Delays every chunk of data by `latency`, in each direction.
    pub fn set_latency(&self, latency: Duration) {
        *self.state.latency.lock().unwrap_or_else(|p| p.into_inner()) = latency;
    }

    /// While on, data in both directions is read and thrown away: requests get no reply,
    /// but no connection is closed (like a network that silently drops packets).
    pub fn blackhole(&self, on: bool) {
        self.state.blackhole.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection now. New connections are still accepted unless
    /// [`refuse`](Proxy::refuse) is on.
    pub fn cut(&self) {
        let open = std::mem::take(&mut *self.state.open.lock().unwrap_or_else(|p| p.into_inner()));
        for stream in open {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// While on, new connections are closed as soon as they are accepted.
    pub fn refuse(&self, on: bool) {
        self.state.refuse.store(on, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.cut();
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn accept_loop(listener: TcpListener, state: Arc<State>) {
    for client in listener.incoming() {
        if state.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        if state.refuse.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(server) = TcpStream::connect(state.upstream) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        {
            let mut open = state.open.lock().unwrap_or_else(|p| p.into_inner());
            for stream in [&client, &server] {
                if let Ok(clone) = stream.try_clone() {
                    open.push(clone);
                }
            }
        }
        pump(&client, &server, &state);
        pump(&server, &client, &state);
    }
}

/// Copies `from` → `to` on two threads: a reader that stamps each chunk with its arrival
/// time, and a writer that sends it once the latency has passed (so latency delays data
/// without throttling it).
fn pump(from: &TcpStream, to: &TcpStream, state: &Arc<State>) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let (chunks, arrivals) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader_state = state.clone();
    thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if reader_state.blackhole.load(Ordering::SeqCst) {
                        continue;
                    }
                    if chunks.send((Instant::now(), buffer[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping `chunks` ends the writer, which then closes its side.
    });
    let writer_state = state.clone();
    thread::spawn(move || {
        for (arrived, chunk) in arrivals {
            let latency = *writer_state
                .latency
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let due = arrived + latency;
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            if writer_state.blackhole.load(Ordering::SeqCst) {
                continue;
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisServer;

    fn ping_through(addr: SocketAddr, timeout: Duration) -> Option<Duration> {
        let mut stream = TcpStream::connect(addr).ok()?;
        stream.set_read_timeout(Some(timeout)).ok()?;
        let started = Instant::now();
        stream.write_all(b"PING\r\n").ok()?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).ok()?;
        (&reply == b"+PONG\r\n").then(|| started.elapsed())
    }

    #[test]
    fn forwards_delays_blackholes_and_cuts() {
        let server = RedisServer::spawn();
        let proxy = Proxy::start(server.addr());
        let plain = ping_through(proxy.addr(), Duration::from_secs(2)).expect("forwarded");
        assert!(plain < Duration::from_millis(100));

        proxy.set_latency(Duration::from_millis(100));
        let slow = ping_through(proxy.addr(), Duration::from_secs(2)).expect("forwarded");
        assert!(
            slow >= Duration::from_millis(200),
            "100 ms each way: {slow:?}"
        );
        proxy.set_latency(Duration::ZERO);

        proxy.blackhole(true);
        assert!(ping_through(proxy.addr(), Duration::from_millis(300)).is_none());
        proxy.blackhole(false);
        assert!(ping_through(proxy.addr(), Duration::from_secs(2)).is_some());

        let mut held = TcpStream::connect(proxy.addr()).unwrap();
        held.write_all(b"PING\r\n").unwrap();
        let mut reply = [0u8; 7];
        held.read_exact(&mut reply).unwrap();
        proxy.cut();
        held.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = held.write_all(b"PING\r\n");
        let mut rest = Vec::new();
        let closed = matches!(held.read_to_end(&mut rest), Ok(0) | Err(_));
        assert!(closed && rest.is_empty(), "a cut connection is closed");

        proxy.refuse(true);
        assert!(ping_through(proxy.addr(), Duration::from_millis(500)).is_none());
        proxy.refuse(false);
        assert!(ping_through(proxy.addr(), Duration::from_secs(2)).is_some());
    }
}
