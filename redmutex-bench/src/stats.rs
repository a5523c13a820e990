//! What a run measures: latency percentiles, the server's command counters, and this
//! process's CPU time and memory.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// Latencies in microseconds, merged from every task of a run.
#[derive(Default)]
pub struct Latencies(Vec<u32>);

impl Latencies {
    pub fn record(&mut self, d: Duration) {
        self.0
            .push(u32::try_from(d.as_micros()).unwrap_or(u32::MAX));
    }

    pub fn merge(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The mean; zero when empty.
    pub fn mean(&self) -> Duration {
        let sum: u64 = self.0.iter().map(|&us| u64::from(us)).sum();
        Duration::from_micros(sum.checked_div(self.0.len() as u64).unwrap_or(0))
    }

    /// The `p`-th percentile (0–100), nearest rank; zero when empty.
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        self.0.sort_unstable();
        let rank = ((p / 100.0) * self.0.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.0.len()) - 1;
        Duration::from_micros(u64::from(self.0[index]))
    }
}

/// Commands the server has run, by name, from `INFO commandstats` (commands run by scripts
/// included, as Redis counts them).
pub async fn command_counts(conn: &mut MultiplexedConnection) -> redis::RedisResult<Counts> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut counts = Counts::default();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        counts.0.push((name.to_owned(), calls));
    }
    Ok(counts)
}

/// CPU time the server has used (user + system, all its threads), from `INFO cpu`.
pub async fn server_cpu(conn: &mut MultiplexedConnection) -> redis::RedisResult<Duration> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    Ok(Duration::from_secs_f64(cpu_seconds(&info)))
}

/// How many channels the server has subscribers on (`INFO stats`' `pubsub_channels`).
pub async fn pubsub_channels(url: &str) -> Result<u64, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = (client.get_multiplexed_async_connection().await).map_err(|e| e.to_string())?;
    let info: String = (redis::cmd("INFO").arg("stats").query_async(&mut conn).await)
        .map_err(|e| e.to_string())?;
    let channels = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("pubsub_channels:"));
    Ok(channels.and_then(|n| n.parse().ok()).unwrap_or(0))
}

/// The sum of `used_cpu_sys` and `used_cpu_user` in an `INFO cpu` reply, in seconds.
fn cpu_seconds(info: &str) -> f64 {
    info.lines()
        .filter_map(|line| {
            let (name, value) = line.trim().split_once(':')?;
            matches!(name, "used_cpu_sys" | "used_cpu_user").then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

#[derive(Default, Clone)]
pub struct Counts(Vec<(String, u64)>);

impl Counts {
    /// Commands run since `earlier`, leaving out the bench's own bookkeeping (INFO).
    pub fn since(&self, earlier: &Counts) -> u64 {
        self.0
            .iter()
            .filter(|(name, _)| name != "info")
            .map(|(name, calls)| calls.saturating_sub(earlier.get(name)))
            .sum()
    }

    /// `set 1.00 evalsha 1.02 …`: each command's calls since `earlier` per op, most
    /// frequent first, leaving out INFO and commands under 0.005 per op.
    pub fn per_op_since(&self, earlier: &Counts, ops: u64) -> String {
        let mut calls: Vec<(&str, f64)> = self
            .0
            .iter()
            .filter(|(name, _)| name != "info")
            .map(|(name, calls)| {
                let n = calls.saturating_sub(earlier.get(name));
                (name.as_str(), n as f64 / ops.max(1) as f64)
            })
            .filter(|(_, per_op)| *per_op >= 0.005)
            .collect();
        calls.sort_by(|a, b| b.1.total_cmp(&a.1));
        calls
            .iter()
            .map(|(name, per_op)| format!("{name} {per_op:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Calls of one command since `earlier`.
    pub fn of_since(&self, command: &str, earlier: &Counts) -> u64 {
        self.get(command).saturating_sub(earlier.get(command))
    }

    fn get(&self, command: &str) -> u64 {
        self.0
            .iter()
            .find(|(name, _)| name == command)
            .map_or(0, |(_, calls)| *calls)
    }
}

/// CPU time (user + system) this process has used.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the struct we give it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// Resident memory of this process, in bytes (from /proc/self/statm).
pub fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut l = Latencies::default();
        for us in [5, 1, 4, 2, 3, 10, 9, 8, 7, 6] {
            l.record(Duration::from_micros(us));
        }
        assert_eq!(l.percentile(50.0), Duration::from_micros(5));
        assert_eq!(l.percentile(99.0), Duration::from_micros(10));
        assert_eq!(l.percentile(0.0), Duration::from_micros(1));
        assert_eq!(Latencies::default().percentile(50.0), Duration::ZERO);
    }

    #[test]
    fn server_cpu_adds_user_and_system_time_of_the_main_process() {
        let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500000\r\n\
                    used_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n";
        assert!((cpu_seconds(info) - 1.75).abs() < 1e-9);
        assert_eq!(cpu_seconds("# CPU\r\n"), 0.0);
    }

    #[test]
    fn command_deltas_leave_out_info() {
        let before = Counts(vec![("set".into(), 10), ("info".into(), 3)]);
        let after = Counts(vec![
            ("set".into(), 15),
            ("evalsha".into(), 4),
            ("info".into(), 9),
        ]);
        assert_eq!(after.since(&before), 9);
        assert_eq!(after.of_since("evalsha", &before), 4);
    }
}
