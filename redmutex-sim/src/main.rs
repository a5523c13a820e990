//! `redmutex-sim`: runs seeded simulations of redmutex and checks each against every
//! claim of docs/SAFETY.md (see the library docs). `--seed S` replays one run and prints
//! its trace; otherwise it sweeps seeds and reports what failed, with the seed to replay.
//! Exit code 0: no violation; 1: some; 64: bad arguments.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use redmutex_sim::{Plan, Scale, Topology};

#[derive(Parser, Debug)]
#[command(
    name = "redmutex-sim",
    about = "Deterministic simulation of redmutex, checked against every claim of docs/SAFETY.md"
)]
struct Cli {
    /// Replay this seed and print its trace (the plan, every request, fault and section).
    #[arg(long)]
    seed: Option<u64>,
    /// With --seed: only these tasks (as numbered in the plan), e.g. 0,3.
    #[arg(long, value_delimiter = ',', requires = "seed")]
    tasks: Option<Vec<usize>>,
    /// With --seed: only these faults (as numbered in the plan).
    #[arg(long, value_delimiter = ',', requires = "seed")]
    faults: Option<Vec<usize>>,
    /// With --seed: cut the faulty part to this many milliseconds.
    #[arg(long, requires = "seed")]
    active_ms: Option<u64>,
    /// With --seed: cut the quiet part to this many milliseconds.
    #[arg(long, requires = "seed")]
    quiet_ms: Option<u64>,
    /// With --seed: shrink the run to a smaller one that still fails, and print how to
    /// replay it.
    #[arg(long, requires = "seed")]
    shrink: bool,
    /// The first seed of a sweep.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// How many seeds to sweep.
    #[arg(long, default_value_t = 1000)]
    runs: u64,
    /// Threads for a sweep.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Short runs (as the CI budget's).
    #[arg(long)]
    short: bool,
    /// List each failing seed's first violation of every rule it broke (not only its
    /// first violation).
    #[arg(long)]
    every_rule: bool,
    /// Servers' clocks exactly as fast as the processes'.
    #[arg(long)]
    no_drift: bool,
    /// Only this topology: single, replicated, replicated-wait, redlock3 or redlock5.
    #[arg(long, value_parser = topology)]
    topology: Option<Topology>,
}

fn topology(text: &str) -> Result<Topology, String> {
    match text {
        "single" => Ok(Topology::Single),
        "replicated" => Ok(Topology::Replicated { confirmed: false }),
        "replicated-wait" => Ok(Topology::Replicated { confirmed: true }),
        "redlock3" => Ok(Topology::Redlock(3)),
        "redlock5" => Ok(Topology::Redlock(5)),
        _ => Err("single, replicated, replicated-wait, redlock3 or redlock5".into()),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.use_stderr() {
                true => ExitCode::from(64),
                false => ExitCode::SUCCESS,
            };
        }
    };
    let mut scale = match cli.short {
        true => Scale::short(),
        false => Scale::default(),
    };
    scale.drift = !cli.no_drift;
    scale.topology = cli.topology;
    let failed = match cli.seed {
        Some(seed) => replay(&cli, seed, scale),
        None => sweep(&cli, scale),
    };
    match failed {
        true => ExitCode::FAILURE,
        false => ExitCode::SUCCESS,
    }
}

/// Replays one seed: prints its trace and violations; true when it failed.
fn replay(cli: &Cli, seed: u64, scale: Scale) -> bool {
    let ms = |ms: Option<u64>| ms.map(Duration::from_millis);
    let plan = Plan::draw(seed, scale).keep(
        cli.tasks.as_deref(),
        cli.faults.as_deref(),
        ms(cli.active_ms),
        ms(cli.quiet_ms),
    );
    let report = redmutex_sim::run(plan.clone(), !cli.shrink);
    let mut out = std::io::stdout().lock();
    let lines = (report.outcome.trace.iter().cloned())
        .chain(report.violations.iter().map(|v| v.to_string()));
    for line in lines {
        // (Into a closed pipe — `| head` — the rest is not wanted: stop quietly.)
        if writeln!(out, "{line}").is_err() {
            return !report.violations.is_empty();
        }
    }
    drop(out);
    if cli.shrink
        && let Some(first) = report.violations.first()
    {
        let small = redmutex_sim::shrink(&plan, first.rule);
        println!("shrunk to:");
        for line in small.describe() {
            println!("{line}");
        }
        println!("replay: {}", replay_command(&small, cli));
    }
    !report.violations.is_empty()
}

fn replay_command(plan: &Plan, cli: &Cli) -> String {
    let list = |ids: Vec<usize>| {
        ids.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut command = format!(
        "redmutex-sim --seed {} --tasks {} --faults {} --active-ms {} --quiet-ms {}",
        plan.seed,
        list(plan.tasks.iter().map(|t| t.id).collect()),
        list(plan.faults.iter().map(|f| f.id).collect()),
        plan.active.as_millis(),
        plan.quiet.as_millis()
    );
    command.push_str(&flags(cli));
    command
}

/// The flags that shape the runs drawn, as typed: a seed replays only with them.
fn flags(cli: &Cli) -> String {
    let mut flags = String::new();
    if cli.short {
        flags.push_str(" --short");
    }
    if cli.no_drift {
        flags.push_str(" --no-drift");
    }
    if let Some(topology) = cli.topology {
        flags.push_str(&format!(" --topology {}", topology.name()));
    }
    flags
}

/// Sweeps seeds; true when any run failed.
fn sweep(cli: &Cli, scale: Scale) -> bool {
    let found = redmutex_sim::sweep(cli.from, cli.runs, scale, cli.threads, None);
    let listed = match cli.every_rule {
        true => &found.all,
        false => &found.failed,
    };
    for (seed, violation) in listed {
        println!("seed {seed}: {violation}");
    }
    println!(
        "{} runs in {:.1?}: {} failed; {:.0} runs per minute, {:.0} simulated seconds per second, {} requests per run",
        found.runs,
        found.wall,
        found.failed.len(),
        found.per_minute(),
        found.speed(),
        found.requests / found.runs.max(1)
    );
    println!(
        "  {} requests to let go, heard by {} holders",
        found.asks.0, found.asks.1
    );
    for (rule, (count, first)) in &found.rules {
        println!(
            "  {rule}: {count} runs, first seed {first} (replay: redmutex-sim --seed {first}{})",
            flags(cli)
        );
    }
    for (topology, (runs, lost)) in &found.failovers {
        println!(
            "  {topology}: {runs} runs with a failover, {lost} of them lost a lock, a permit, \
             a minimum hold or fence order to it"
        );
    }
    !found.failed.is_empty()
}
