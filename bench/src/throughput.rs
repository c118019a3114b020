//! The throughput phase: P producers submit `--tasks` tasks while W workers lease
//! and complete them; lifecycles/s is measured from the first Submit to the last
//! Complete acknowledgement, submit/s from the first Submit to the last ack.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::args::Params;
use crate::rpc::{self, Broker};
use crate::workers::{self, Progress};

/// Gives every worker's first long-poll time to reach the broker, as in a fleet
/// that is already running when work arrives.
pub const WORKERS_SETTLE: Duration = Duration::from_millis(300);

pub struct Throughput {
    pub elapsed: Duration,
    pub submit_elapsed: Duration,
    pub completed: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Throughput {
    pub fn lifecycles_per_sec(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64()
    }
}

pub async fn run(
    p: &Params,
    workers: &[Broker],
    producers: &[Broker],
    queue: &str,
) -> anyhow::Result<Throughput> {
    let progress = Arc::new(Progress::new(p.tasks, None));
    let mut worker_set = workers::spawn_all(workers, queue, p.mode, p.lease_batch, &progress);
    tokio::time::sleep(WORKERS_SETTLE).await;

    let start = Instant::now();
    let payload = Arc::new(vec![0x5a_u8; p.payload_bytes]);
    let mut producer_set = JoinSet::new();
    let n = producers.len() as u64;
    for (i, client) in producers.iter().enumerate() {
        let i = i as u64;
        let range = p.tasks * i / n..p.tasks * (i + 1) / n;
        let job = produce(
            client.clone(),
            queue.to_string(),
            range,
            p.submit_batch,
            payload.clone(),
            progress.clone(),
        );
        producer_set.spawn(job);
    }
    let mut submit_end = start;
    let finished = tokio::time::timeout(p.timeout, async {
        while let Some(joined) = producer_set.join_next().await {
            submit_end = submit_end.max(joined??);
        }
        progress.stop.cancelled().await;
        anyhow::Ok(())
    })
    .await;
    progress.stop.cancel();
    while worker_set.join_next().await.is_some() {}
    match finished {
        Err(_) => anyhow::bail!(
            "throughput phase timed out: {} of {} tasks completed ({} errors, first: {:?})",
            progress.completed(),
            p.tasks,
            progress.errors.count(),
            progress.errors.first()
        ),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(())) => {}
    }
    let done_at = progress.done_at().unwrap_or_else(Instant::now);
    Ok(Throughput {
        elapsed: done_at - start,
        submit_elapsed: submit_end - start,
        completed: progress.completed(),
        errors: progress.errors.count(),
        first_error: progress.errors.first(),
    })
}

/// Submits tasks `range` in calls of `batch`, one call in flight; returns when
/// the last call was acknowledged.
async fn produce(
    mut client: Broker,
    queue: String,
    range: Range<u64>,
    batch: usize,
    payload: Arc<Vec<u8>>,
    progress: Arc<Progress>,
) -> anyhow::Result<Instant> {
    let mut next = range.start;
    while next < range.end {
        let end = (next + batch as u64).min(range.end);
        let tasks = (next..end)
            .map(|_| rpc::spec(&queue, payload.as_ref().clone()))
            .collect();
        rpc::submit(&mut client, tasks, &progress.errors).await?;
        next = end;
    }
    Ok(Instant::now())
}
