//! `with-redis COMMAND [ARG...]`: starts a private redis-server on a free loopback port,
//! runs COMMAND with `REDIS_URL` pointing at it, stops the server, and exits with the
//! command's status. The README's demo uses it so that no system Redis is needed.

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: with-redis COMMAND [ARG...]");
        return ExitCode::from(64);
    };
    let server = testkit::RedisServer::spawn();
    eprintln!("with-redis: private redis-server at {}", server.url());
    let status = Command::new(&program)
        .args(args)
        .env("REDIS_URL", server.url())
        .status();
    drop(server);
    match status {
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| u8::try_from(c).unwrap_or(1))),
        Err(e) => {
            eprintln!("with-redis: cannot run {program:?}: {e}");
            ExitCode::from(127)
        }
    }
}
