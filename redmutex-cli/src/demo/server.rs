//! A private redis-server for the demo: a free loopback port, no persistence, stopped on
//! drop. Mirrors the test kit's server, kept here so the CLI has no test-only dependency.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

pub struct PrivateServer {
    child: Child,
    dir: PathBuf,
    pub url: String,
}

impl PrivateServer {
    pub async fn start() -> Result<PrivateServer, String> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let dir = std::env::temp_dir().join(format!("redmutex-demo-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {dir:?}: {e}"))?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(["--logfile", "redis.log", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start redis-server ({e}); install it (Debian: apt-get install redis-server) \
                     or give --redis URL"
                )
            })?;
        let mut server = PrivateServer {
            child,
            dir,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "redis-server exited at start ({status}); see {:?}",
                    server.dir.join("redis.log")
                ));
            }
            if redmutex::connection::connect(&server.url).await.is_ok() {
                return Ok(server);
            }
            if started.elapsed() > Duration::from_secs(10) {
                return Err("redis-server did not answer within 10 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
