//! `redmutex-torture`: mutual exclusion under load and injected faults.
//!
//! Worker processes (this binary again, `worker`) run many tasks each that acquire, hold
//! and release a few keys, on one node, on five-node Redlock, on a six-node cluster and on
//! a master with a replica under Sentinel (with and without replica confirmation), while a
//! seeded schedule cuts and slows connections, pauses, kills and restarts nodes, fails a
//! master over to a replica that missed its last writes, freezes worker processes past
//! their TTL and kills client connections. An independent
//! checker then reads every critical section and reports overlaps, fence order and what
//! was left behind — by the simulator's own rules where the claims are the same. Exit code 0: the guarantee held in every mode (where a failover lost
//! writes nobody waited for, the locks lost are counted, not failed); 1: it did not.

mod checker;
mod clock;
mod record;
mod report;
mod run;
mod schedule;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::schedule::Mode;

#[derive(Parser, Debug)]
#[command(
    name = "redmutex-torture",
    about = "Checks redmutex's mutual exclusion under load and injected faults",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    run: run::RunArgs,
    #[command(subcommand)]
    command: Option<Internal>,
}

#[derive(Subcommand, Debug)]
enum Internal {
    /// One worker process (started by the coordinator).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Internal::Worker(args)) = cli.command {
        return worker::main(args);
    }
    let mut args = cli.run;
    if args.modes.is_empty() {
        args.modes = vec![
            Mode::Single,
            Mode::Redlock,
            Mode::Cluster,
            Mode::Sentinel,
            Mode::SentinelConfirmed,
        ];
    }
    let seed = args
        .seed
        .unwrap_or_else(|| clock::now_ns() ^ u64::from(std::process::id()));
    let mut passed = true;
    for mode in args.modes.clone() {
        if !args.json {
            println!("redmutex torture: {} (seed {seed})", mode.name());
        }
        let report = run::run_mode(mode, seed, &args);
        passed &= report.passed();
        if args.json {
            println!("{}", report::json(&report));
        } else {
            println!("{}", report::text(&report));
        }
    }
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
