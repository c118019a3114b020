//! The results of a run: a readable table, then one JSON line that scripts parse
//! (`bench/compare.sh` reads the last line of the output).

use std::fmt::Write;
use std::time::Duration;

use serde_json::{Value, json};

use crate::args::Params;
use crate::latency::Latency;
use crate::throughput::Throughput;

pub struct Report {
    pub params: Params,
    pub label: Option<String>,
    pub store: Option<&'static str>,
    pub backlog_load: Option<Duration>,
    pub throughput: Throughput,
    /// The closed loop (if measured) first, then one open loop per rate.
    pub latency: Vec<Latency>,
    pub broker_pid: Option<u32>,
    pub broker_rss_mb: Option<f64>,
    /// The broker's CPU seconds during the throughput phase.
    pub broker_cpu_s: Option<f64>,
    /// The database server's CPU in the throughput phase (`--db-pid`).
    pub db_cpu_s: Option<f64>,
}

/// The nearest-rank percentile `q` (0-1] of sorted samples.
pub fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    Some(sorted[rank - 1])
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3)
}

fn fmt_ms(d: Option<Duration>) -> String {
    ms(d).map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

impl Report {
    fn submit_per_sec(&self) -> f64 {
        self.throughput.completed as f64 / self.throughput.submit_elapsed.as_secs_f64()
    }

    /// The first open loop: the one the `dispatch_*` fields have always described.
    fn first_open(&self) -> Option<&Latency> {
        self.latency.iter().find(|l| l.rate.is_some())
    }

    fn dispatch(&self, q: f64) -> Option<Duration> {
        percentile(&self.first_open()?.samples, q)
    }

    fn dispatch_from_send(&self, q: f64) -> Option<Duration> {
        percentile(&self.first_open()?.from_send, q)
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let p = &self.params;
        let t = &self.throughput;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "taskbroker-bench: mode={} store={} tasks={} producers={} workers={} \
             submit_batch={} lease_batch={} payload={} B backlog={} future_backlog={} replicas={}",
            p.mode.name(),
            self.store.unwrap_or("?"),
            p.tasks,
            p.producers,
            p.workers,
            p.submit_batch,
            p.lease_batch,
            p.payload_bytes,
            p.backlog,
            p.future_backlog,
            p.replicas
        );
        let mut row = |phase: &str, metric: &str, value: String| {
            let _ = writeln!(s, "  {phase:<11} {metric:<25} {value}");
        };
        if let Some(d) = self.backlog_load {
            let rate = p.backlog as f64 / d.as_secs_f64();
            row(
                "backlog",
                "pre-loaded",
                format!(
                    "{} tasks in {:.1} s ({rate:.0}/s)",
                    p.backlog,
                    d.as_secs_f64()
                ),
            );
        }
        row(
            "throughput",
            "lifecycles/s",
            format!("{:.0}", t.lifecycles_per_sec()),
        );
        row("", "submit/s", format!("{:.0}", self.submit_per_sec()));
        row(
            "",
            "elapsed",
            format!(
                "{:.2} s (submits done at {:.2} s)",
                t.elapsed.as_secs_f64(),
                t.submit_elapsed.as_secs_f64()
            ),
        );
        row("", "errors", error_text(t.errors, &t.first_error));
        if self.latency.is_empty() {
            row("dispatch", "", "not measured".into());
        }
        for l in &self.latency {
            let load = match l.rate {
                Some(rate) => format!("open loop, {rate:.0} tasks/s offered"),
                None => "closed loop, one task at a time".into(),
            };
            row(
                "dispatch",
                "load",
                format!(
                    "{load}: {} tasks, {:.0}/s achieved",
                    l.tasks,
                    l.achieved_rate()
                ),
            );
            let pct = |v: &[Duration]| {
                format!(
                    "{} / {} / {}",
                    fmt_ms(percentile(v, 0.5)),
                    fmt_ms(percentile(v, 0.99)),
                    fmt_ms(percentile(v, 1.0))
                )
            };
            row("", "ms p50/p99/max from ack", pct(&l.samples));
            row("", "ms p50/p99/max from send", pct(&l.from_send));
            if l.rate.is_some() {
                row("", "ms p50/p99/max send lag", pct(&l.send_lag));
            }
            row(
                "",
                "samples",
                format!(
                    "{} ({} lease replies seen before their submit ack, counted as 0)",
                    l.samples.len(),
                    l.lease_before_ack
                ),
            );
            row("", "errors", error_text(l.errors, &l.first_error));
        }
        let rss = match (self.broker_rss_mb, self.broker_pid) {
            (Some(mb), Some(pid)) => format!("{mb:.1} MiB (VmHWM of pid {pid})"),
            _ => "not measured (--broker-pid or --spawn-broker)".into(),
        };
        row("broker", "peak RSS", rss);
        if let Some(us) = self.cpu_per_lifecycle_us() {
            row(
                "broker",
                "CPU / lifecycle",
                format!("{us:.0} us (throughput phase)"),
            );
        }
        if let Some(us) = self.db_cpu_per_lifecycle_us() {
            row(
                "database",
                "CPU / lifecycle",
                format!("{us:.0} us (throughput phase)"),
            );
        }
        s
    }

    /// The database server's CPU per lifecycle in the throughput phase, microseconds.
    fn db_cpu_per_lifecycle_us(&self) -> Option<f64> {
        let n = self.throughput.completed.max(1) as f64;
        self.db_cpu_s.map(|s| s * 1e6 / n)
    }

    /// Broker CPU per lifecycle in the throughput phase, microseconds.
    fn cpu_per_lifecycle_us(&self) -> Option<f64> {
        let n = self.throughput.completed.max(1) as f64;
        self.broker_cpu_s.map(|s| s * 1e6 / n)
    }

    /// The one-line JSON summary, parameters included.
    pub fn json(&self) -> Value {
        let p = &self.params;
        let t = &self.throughput;
        let l = self.first_open();
        json!({
            "system": "taskbroker",
            "label": self.label,
            "store": self.store,
            "mode": p.mode.name(),
            "tasks": p.tasks,
            "producers": p.producers,
            "workers": p.workers,
            "submit_batch": p.submit_batch,
            "lease_batch": p.lease_batch,
            "payload_bytes": p.payload_bytes,
            "backlog": p.backlog,
            "lifecycles_per_sec": round(t.lifecycles_per_sec(), 1),
            "submit_per_sec": round(self.submit_per_sec(), 1),
            "elapsed_sec": round(t.elapsed.as_secs_f64(), 3),
            "dispatch_rate": l.and_then(|l| l.rate).map(|r| round(r, 1)),
            "dispatch_samples": l.map(|l| l.samples.len()),
            "dispatch_p50_ms": ms(self.dispatch(0.5)),
            "dispatch_p99_ms": ms(self.dispatch(0.99)),
            "dispatch_max_ms": ms(self.dispatch(1.0)),
            "dispatch_from_send_p50_ms": ms(self.dispatch_from_send(0.5)),
            "dispatch_from_send_p99_ms": ms(self.dispatch_from_send(0.99)),
            "broker_rss_mb": self.broker_rss_mb.map(|v| round(v, 1)),
            "errors": t.errors + self.latency.iter().map(|l| l.errors).sum::<u64>(),
            "shape": "overlap",
            "replicas": p.replicas,
            "latency": self.latency.iter().map(latency_json).collect::<Vec<_>>(),
            "lease_next": p.lease_next,
            "broker_cpu_us_per_lifecycle": self.cpu_per_lifecycle_us().map(|v| round(v, 1)),
            "db_cpu_us_per_lifecycle": self.db_cpu_per_lifecycle_us().map(|v| round(v, 1)),
        })
    }
}

/// One latency loop in the fields every system's bench prints (bench/peers too):
/// from send unless named `from_ack`.
fn latency_json(l: &Latency) -> Value {
    json!({
        "loop": if l.rate.is_some() { "open" } else { "closed" },
        "offered_rate": l.rate.map(|r| round(r, 1)),
        "achieved_rate": round(l.achieved_rate(), 1),
        "samples": l.from_send.len(),
        "p50_ms": ms(percentile(&l.from_send, 0.5)),
        "p99_ms": ms(percentile(&l.from_send, 0.99)),
        "max_ms": ms(percentile(&l.from_send, 1.0)),
        "from_ack_p50_ms": ms(percentile(&l.samples, 0.5)),
        "from_ack_p99_ms": ms(percentile(&l.samples, 0.99)),
        "send_lag_p99_ms": ms(percentile(&l.send_lag, 0.99)),
    })
}

fn error_text(count: u64, first: &Option<String>) -> String {
    match first {
        Some(e) => format!("{count} (first: {e})"),
        None => count.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&v, 1.0), Some(Duration::from_millis(100)));
        assert_eq!(percentile(&v[..1], 0.99), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn milliseconds_keep_microsecond_precision() {
        assert_eq!(ms(Some(Duration::from_micros(1234))), Some(1.234));
        assert_eq!(ms(None), None);
    }
}
