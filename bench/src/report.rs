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
    pub latency: Option<Latency>,
    pub broker_pid: Option<u32>,
    pub broker_rss_mb: Option<f64>,
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

    fn dispatch(&self, q: f64) -> Option<Duration> {
        percentile(&self.latency.as_ref()?.samples, q)
    }

    fn dispatch_from_send(&self, q: f64) -> Option<Duration> {
        percentile(&self.latency.as_ref()?.from_send, q)
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let p = &self.params;
        let t = &self.throughput;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "taskbroker-bench: mode={} store={} tasks={} producers={} workers={} \
             submit_batch={} lease_batch={} payload={} B backlog={}",
            p.mode.name(),
            self.store.unwrap_or("?"),
            p.tasks,
            p.producers,
            p.workers,
            p.submit_batch,
            p.lease_batch,
            p.payload_bytes,
            p.backlog
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
        match &self.latency {
            Some(l) => {
                row(
                    "dispatch",
                    "offered load",
                    format!("{:.0} tasks/s, {} tasks", l.rate, l.tasks),
                );
                row(
                    "",
                    "ms p50/p99/max from ack",
                    format!(
                        "{} / {} / {}",
                        fmt_ms(self.dispatch(0.5)),
                        fmt_ms(self.dispatch(0.99)),
                        fmt_ms(self.dispatch(1.0))
                    ),
                );
                row(
                    "",
                    "ms p50/p99/max from send",
                    format!(
                        "{} / {} / {}",
                        fmt_ms(self.dispatch_from_send(0.5)),
                        fmt_ms(self.dispatch_from_send(0.99)),
                        fmt_ms(self.dispatch_from_send(1.0))
                    ),
                );
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
            None => row("dispatch", "", "not measured".into()),
        }
        let rss = match (self.broker_rss_mb, self.broker_pid) {
            (Some(mb), Some(pid)) => format!("{mb:.1} MiB (VmHWM of pid {pid})"),
            _ => "not measured (--broker-pid or --spawn-broker)".into(),
        };
        row("broker", "peak RSS", rss);
        s
    }

    /// The one-line JSON summary, parameters included.
    pub fn json(&self) -> Value {
        let p = &self.params;
        let t = &self.throughput;
        let l = self.latency.as_ref();
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
            "dispatch_rate": l.map(|l| round(l.rate, 1)),
            "dispatch_samples": l.map(|l| l.samples.len()),
            "dispatch_p50_ms": ms(self.dispatch(0.5)),
            "dispatch_p99_ms": ms(self.dispatch(0.99)),
            "dispatch_max_ms": ms(self.dispatch(1.0)),
            "dispatch_from_send_p50_ms": ms(self.dispatch_from_send(0.5)),
            "dispatch_from_send_p99_ms": ms(self.dispatch_from_send(0.99)),
            "broker_rss_mb": self.broker_rss_mb.map(|v| round(v, 1)),
            "errors": t.errors + l.map_or(0, |l| l.errors),
        })
    }
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
