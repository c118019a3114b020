//! The broker under test: started by the benchmark (`--spawn-broker`) or already
//! running (`--broker-pid`), and its peak resident memory from `/proc`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// What the broker prints once its gRPC port is bound.
const LISTENING: &str = "taskbroker listening on ";
/// Start-up includes migrations, which on a fresh Postgres take a moment.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The broker drains in-flight calls for up to 20 s (`shutdown_grace`) on SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A broker process the benchmark started; stopped with [`SpawnedBroker::stop`]
/// (or killed when dropped, so an error path never leaves it running).
pub struct SpawnedBroker {
    child: Child,
    pub pid: u32,
    /// `http://127.0.0.1:PORT`.
    pub addr: String,
}

impl SpawnedBroker {
    /// Starts `BIN serve` on free loopback ports and waits for its listening line.
    pub async fn start(bin: &Path, database_url: &str) -> anyhow::Result<SpawnedBroker> {
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(["--database-url", database_url])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if std::env::var_os("RUST_LOG").is_none() {
            // Per-call logging would cost the broker CPU that the benchmark measures.
            cmd.env("RUST_LOG", "warn");
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("the broker exited at once")?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let mut lines = BufReader::new(stdout).lines();
        let addr = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(addr) = line.strip_prefix(LISTENING) {
                    return Ok(format!("http://{}", addr.trim()));
                }
            }
            bail!("the broker exited before it listened")
        })
        .await
        .context("the broker did not listen within 60 s")??;
        // Keep reading stdout so the broker never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(SpawnedBroker { child, pid, addr })
    }

    /// SIGTERM (graceful drain), then SIGKILL if it is still running after 30 s.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        // std has no signal API and this crate forbids unsafe code: use kill(1).
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                eprintln!("the broker did not stop within 30 s; killing it");
                self.child.kill().await?;
            }
        }
        Ok(())
    }
}

/// The peak resident set size (VmHWM) of a process, in MiB.
pub fn peak_rss_mb(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_vm_hwm_kb(&status)
        .map(|kb| kb as f64 / 1024.0)
        .with_context(|| format!("no VmHWM line in {path}"))
}

fn parse_vm_hwm_kb(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) a process has used so far, from /proc/PID/stat
/// (for broker CPU per lifecycle). Linux reports them in clock ticks of
/// USER_HZ, which is 100 on every Linux ABI.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_seconds(&stat)
}

/// CPU seconds a server and its processes have used so far: its own, that of
/// the children it waited for (cutime, cstime), and that of each live child
/// (a Postgres backend; threads, as mysqld's, count in the process's own).
/// The difference of two readings is what the server spent between them, as
/// long as no child that the difference spans exits unreaped.
pub fn tree_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut total = parse_cpu_seconds(&stat)? + parse_children_cpu_seconds(&stat)?;
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children
        .split_whitespace()
        .filter_map(|c| c.parse::<u32>().ok())
    {
        // A child gone meanwhile is counted in cutime on the next reading.
        if let Some(s) = cpu_seconds(child) {
            total += s;
        }
    }
    Some(total)
}

fn parse_children_cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 16 and 17 (cutime, cstime).
    let cutime: u64 = fields.get(13)?.parse().ok()?;
    let cstime: u64 = fields.get(14)?.parse().ok()?;
    Some((cutime + cstime) as f64 / 100.0)
}

fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces: count fields after its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_utime_plus_stime() {
        let stat = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0";
        assert_eq!(parse_cpu_seconds(stat), Some(3.0));
        assert_eq!(parse_children_cpu_seconds(stat), Some(0.0));
        let reaped = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 700 30 20 0 4 0";
        assert_eq!(parse_children_cpu_seconds(reaped), Some(7.3));
        assert_eq!(parse_cpu_seconds("garbage"), None);
    }

    #[test]
    fn vm_hwm_is_read_in_kilobytes() {
        let status =
            "Name:\ttaskbroker\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t 40000 kB\n";
        assert_eq!(parse_vm_hwm_kb(status), Some(51200));
        assert_eq!(parse_vm_hwm_kb("Name:\tx\n"), None);
    }

    #[test]
    fn the_own_process_has_a_peak_rss() {
        assert!(peak_rss_mb(std::process::id()).unwrap() > 0.0);
    }
}
