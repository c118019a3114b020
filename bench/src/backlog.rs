//! Pre-loads a backlog of tasks into a queue nobody leases, so the measured
//! phases run against a big task table (the "1M-task backlog" target).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::rpc::{self, Broker, Errors};

/// Tasks per Submit call while loading (the broker's maximum).
const BATCH: u64 = 1000;
/// Concurrent loading calls.
const LOADERS: usize = 4;
/// A progress line on stderr every this many tasks.
const REPORT_EVERY: u64 = 100_000;

/// Submits `n` tasks to `queue`; returns how long it took. With `future`, each
/// is due in a day at priority 10: waiting in the measured queue itself, ahead
/// of every measured task in priority order, never leased during the run.
pub async fn preload(
    clients: &[Broker],
    queue: &str,
    n: u64,
    payload_bytes: usize,
    timeout: Duration,
    future: bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    let payload = vec![0x5a_u8; payload_bytes];
    let mut loaders = JoinSet::new();
    for client in clients.iter().cycle().take(LOADERS) {
        let (mut client, next, errors) = (client.clone(), next.clone(), errors.clone());
        let (queue, payload) = (queue.to_string(), payload.clone());
        loaders.spawn(async move {
            loop {
                let from = next.fetch_add(BATCH, Ordering::Relaxed);
                if from >= n {
                    return anyhow::Ok(());
                }
                let to = (from + BATCH).min(n);
                let later = std::time::SystemTime::now() + Duration::from_secs(86_400);
                let tasks = (from..to)
                    .map(|_| {
                        let mut t = rpc::spec(&queue, payload.clone());
                        if future {
                            t.priority = 10;
                            t.run_at = Some(prost_types::Timestamp::from(later));
                        }
                        t
                    })
                    .collect();
                rpc::submit(&mut client, tasks, &errors).await?;
                if to / REPORT_EVERY != from / REPORT_EVERY || to == n {
                    eprintln!("backlog: {to}/{n} tasks submitted");
                }
            }
        });
    }
    tokio::time::timeout(timeout, async {
        while let Some(joined) = loaders.join_next().await {
            joined??;
        }
        anyhow::Ok(())
    })
    .await
    .map_err(|_| anyhow::anyhow!("loading the backlog timed out"))??;
    Ok(start.elapsed())
}
