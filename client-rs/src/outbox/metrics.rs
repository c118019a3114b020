//! The relay's Prometheus metrics: counters kept by every [`Relay`] clone, rendered in
//! the text exposition format by [`Relay::metrics_text`] and served by
//! [`serve_metrics`] (`taskbroker relay --metrics-listen`). The oldest waiting row's age
//! is read from the table at each scrape, so it is never stale.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{Relay, RelayReport};

/// Totals since the relay started.
#[derive(Debug, Default)]
pub(super) struct Counters {
    shipped: AtomicU64,
    deduplicated: AtomicU64,
    refused: AtomicU64,
    batches: AtomicU64,
    failures: AtomicU64,
    last_lag_ms: AtomicU64,
}

impl Counters {
    pub(super) fn add(&self, r: &RelayReport) {
        self.shipped.fetch_add(r.shipped, Ordering::Relaxed);
        self.deduplicated
            .fetch_add(r.deduplicated, Ordering::Relaxed);
        self.refused.fetch_add(r.refused, Ordering::Relaxed);
        self.batches.fetch_add(r.batches, Ordering::Relaxed);
        if r.batches > 0 {
            self.last_lag_ms
                .store(r.max_lag.as_millis() as u64, Ordering::Relaxed);
        }
    }

    pub(super) fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition text; `oldest` is the oldest waiting row's age, `None` when the
    /// table could not be read.
    pub(super) fn render(&self, oldest: Option<Duration>) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed).to_string();
        metric(
            "taskbroker_relay_rows_shipped_total",
            "counter",
            "Outbox rows the broker acknowledged and the relay deleted.",
            get(&self.shipped),
        );
        metric(
            "taskbroker_relay_rows_deduplicated_total",
            "counter",
            "Shipped rows whose key the broker already held (shipped again after a crash, or a spec key of an existing task).",
            get(&self.deduplicated),
        );
        metric(
            "taskbroker_relay_rows_refused_total",
            "counter",
            "Rows the broker refused for good, now marked failed_at.",
            get(&self.refused),
        );
        metric(
            "taskbroker_relay_batches_total",
            "counter",
            "Submit calls the broker acknowledged.",
            get(&self.batches),
        );
        metric(
            "taskbroker_relay_batch_failures_total",
            "counter",
            "Batches rolled back because the broker or the database failed (retried).",
            get(&self.failures),
        );
        metric(
            "taskbroker_relay_last_batch_lag_seconds",
            "gauge",
            "The longest a row of the last shipped batch waited between its insert and its shipping.",
            format!(
                "{:.3}",
                self.last_lag_ms.load(Ordering::Relaxed) as f64 / 1000.0
            ),
        );
        metric(
            "taskbroker_relay_source_up",
            "gauge",
            "1 when the outbox table could be read for this scrape.",
            u8::from(oldest.is_some()).to_string(),
        );
        if let Some(age) = oldest {
            metric(
                "taskbroker_relay_oldest_pending_seconds",
                "gauge",
                "Age of the oldest outbox row waiting to be shipped; 0 when none waits.",
                format!("{:.3}", age.as_secs_f64()),
            );
        }
        out
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped: one short HTTP/1.1
/// answer per connection.
pub async fn serve_metrics(listener: TcpListener, relay: Relay) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let relay = relay.clone();
        tokio::spawn(async move {
            // A scrape sends its request at once; a client that does not is dropped.
            let mut buf = vec![0u8; 4096];
            let mut len = 0;
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while len < buf.len() {
                    match stream.read(&mut buf[len..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => len += n,
                    }
                    if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let (status, body) = if buf[..len].starts_with(b"GET /metrics ") {
                ("200 OK", relay.metrics_text().await)
            } else {
                ("404 Not Found", "not found: try /metrics\n".to_string())
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
