//! The dispatch-latency phase, against W workers waiting in long polls; each
//! task's latency is measured from its Submit being sent (and from its
//! acknowledgement) to the Lease reply that carries it, all on this process's
//! monotonic clock. A task's payload carries its number.
//!
//! - Open loop ([`run`]): tasks are submitted at a fixed offered rate; a slow
//!   answer does not slow the sender.
//! - Closed loop ([`run_closed`]): one task at a time for `--latency-seconds`:
//!   submit one, wait until a worker's Lease reply carried it, submit the next.
//!   This is what one waiting worker sees of one producer's request.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::args::{Mode, Params};
use crate::rpc::{self, Broker};
use crate::throughput::WORKERS_SETTLE;
use crate::workers::{self, Progress, Stamps, payload_with_seq};

/// The sender wakes every millisecond and submits what is due by then.
const TICK: Duration = Duration::from_millis(1);
/// Bounds the closed loop's stamp arrays: no broker answers faster than this.
const CLOSED_LOOP_MAX_PER_SEC: f64 = 20_000.0;

pub struct Latency {
    /// The offered rate of an open loop; None for the closed loop.
    pub rate: Option<f64>,
    pub tasks: u64,
    /// Submit ack -> lease reply of every task, sorted.
    pub samples: Vec<Duration>,
    /// Submit sent -> lease reply of every task, sorted (includes the Submit itself).
    pub from_send: Vec<Duration>,
    /// Lease replies processed before their task's Submit ack (counted as 0).
    pub lease_before_ack: u64,
    /// First Submit sent -> last lease reply.
    pub span: Duration,
    /// Open loop: how late each Submit was sent against its schedule, sorted.
    pub send_lag: Vec<Duration>,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Latency {
    /// Tasks leased per second over [`Latency::span`].
    pub fn achieved_rate(&self) -> f64 {
        self.from_send.len() as f64 / self.span.as_secs_f64().max(1e-9)
    }
}

pub async fn run(
    p: &Params,
    rate: f64,
    workers: &[Broker],
    producers: &[Broker],
    queue: &str,
) -> anyhow::Result<Latency> {
    let total = ((rate * p.latency_seconds).round() as u64).max(1);
    let origin = Instant::now();
    let sent_at = Arc::new(Stamps::new(origin, total as usize));
    let acked = Arc::new(Stamps::new(origin, total as usize));
    let leased = Stamps::new(origin, total as usize);
    let progress = Arc::new(Progress::new(total, Some(leased)));
    let mut worker_set = workers::spawn_all(workers, queue, p.mode, p.lease_batch, &progress);
    tokio::time::sleep(WORKERS_SETTLE).await;

    // Per-task mode sends one task per Submit, batched mode what is due in one tick.
    let per_call = match p.mode {
        Mode::PerTask => 1,
        Mode::Batched => p.submit_batch as u64,
    };
    let start = Instant::now();
    let sent_all = tokio::time::timeout(p.timeout, async {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut submits = JoinSet::new();
        let (mut sent, mut call) = (0u64, 0usize);
        while sent < total {
            tick.tick().await;
            let due = ((start.elapsed().as_secs_f64() * rate) as u64).min(total);
            while sent < due {
                let end = (sent + per_call).min(due);
                let client = producers[call % producers.len()].clone();
                call += 1;
                let job = submit_range(
                    client,
                    queue.to_string(),
                    sent..end,
                    p.payload_bytes,
                    [sent_at.clone(), acked.clone()],
                    progress.clone(),
                );
                submits.spawn(job);
                sent = end;
            }
            while let Some(joined) = submits.try_join_next() {
                joined??;
            }
        }
        while let Some(joined) = submits.join_next().await {
            joined??;
        }
        progress.stop.cancelled().await;
        anyhow::Ok(())
    })
    .await;
    progress.stop.cancel();
    while worker_set.join_next().await.is_some() {}
    match sent_all {
        Err(_) => anyhow::bail!(
            "latency phase timed out: {} of {total} tasks completed",
            progress.completed()
        ),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(())) => {}
    }

    let mut latency = summarize(Some(rate), total, &sent_at, &acked, &progress);
    // How late each Submit was sent against its schedule: a late sender means the
    // load generator, not the broker, set the pace.
    let scheduled = start - origin;
    latency.send_lag = (0..total)
        .filter_map(|i| {
            let due = scheduled + Duration::from_secs_f64(i as f64 / rate);
            Some(sent_at.get(i as usize)?.saturating_sub(due))
        })
        .collect();
    latency.send_lag.sort_unstable();
    Ok(latency)
}

/// The closed loop: one task per Submit, the next sent once a Lease reply carried
/// the previous one, for `--latency-seconds`. Producers take turns, so with
/// several replicas the sends spread across them.
pub async fn run_closed(
    p: &Params,
    workers: &[Broker],
    producers: &[Broker],
    queue: &str,
) -> anyhow::Result<Latency> {
    let cap = ((p.latency_seconds * CLOSED_LOOP_MAX_PER_SEC) as usize).max(1);
    let origin = Instant::now();
    let sent_at = Arc::new(Stamps::new(origin, cap));
    let acked = Arc::new(Stamps::new(origin, cap));
    // The target is never reached: the loop stops the workers itself.
    let progress = Arc::new(Progress::new(u64::MAX, Some(Stamps::new(origin, cap))));
    let mut worker_set = workers::spawn_all(workers, queue, p.mode, p.lease_batch, &progress);
    tokio::time::sleep(WORKERS_SETTLE).await;

    let length = Duration::from_secs_f64(p.latency_seconds);
    let looped = tokio::time::timeout(p.timeout, async {
        let leased = progress.leased.as_ref().expect("set above");
        let start = Instant::now();
        let mut seq = 0usize;
        while seq == 0 || (start.elapsed() < length && seq < cap) {
            let client = producers[seq % producers.len()].clone();
            let stamps = [sent_at.clone(), acked.clone()];
            let one = seq as u64..seq as u64 + 1;
            submit_range(
                client,
                queue.to_string(),
                one,
                p.payload_bytes,
                stamps,
                progress.clone(),
            )
            .await?;
            // A stamp set between the check and the wait leaves a permit: no lost wake-up.
            while leased.get(seq).is_none() {
                progress.leased_signal.notified().await;
            }
            seq += 1;
        }
        anyhow::Ok(seq as u64)
    })
    .await;
    progress.stop.cancel();
    while worker_set.join_next().await.is_some() {}
    let sent = match looped {
        Err(_) => anyhow::bail!("closed loop timed out"),
        Ok(sent) => sent?,
    };
    Ok(summarize(None, sent, &sent_at, &acked, &progress))
}

/// The latencies of tasks `0..total` from their stamps.
fn summarize(
    rate: Option<f64>,
    total: u64,
    sent_at: &Stamps,
    acked: &Stamps,
    progress: &Progress,
) -> Latency {
    let leased = progress
        .leased
        .as_ref()
        .expect("latency phases stamp leases");
    let mut samples = Vec::with_capacity(total as usize);
    let mut from_send = Vec::with_capacity(total as usize);
    let mut lease_before_ack = 0;
    let (mut first_send, mut last_lease) = (None::<Duration>, Duration::ZERO);
    for i in 0..total as usize {
        if let (Some(send), Some(ack), Some(lease)) = (sent_at.get(i), acked.get(i), leased.get(i))
        {
            if lease < ack {
                lease_before_ack += 1;
            }
            samples.push(lease.saturating_sub(ack));
            from_send.push(lease.saturating_sub(send));
            first_send = Some(first_send.map_or(send, |f| f.min(send)));
            last_lease = last_lease.max(lease);
        }
    }
    samples.sort_unstable();
    from_send.sort_unstable();
    Latency {
        rate,
        tasks: total,
        samples,
        from_send,
        lease_before_ack,
        span: last_lease.saturating_sub(first_send.unwrap_or_default()),
        send_lag: Vec::new(),
        errors: progress.errors.count(),
        first_error: progress.errors.first(),
    }
}

/// Submits tasks `seqs` in one call and stamps when it was sent and acknowledged.
async fn submit_range(
    mut client: Broker,
    queue: String,
    seqs: Range<u64>,
    payload_bytes: usize,
    [sent_at, acked]: [Arc<Stamps>; 2],
    progress: Arc<Progress>,
) -> anyhow::Result<()> {
    let tasks = seqs
        .clone()
        .map(|seq| rpc::spec(&queue, payload_with_seq(seq, payload_bytes)))
        .collect();
    for seq in seqs.clone() {
        sent_at.set_now(seq as usize);
    }
    rpc::submit(&mut client, tasks, &progress.errors).await?;
    for seq in seqs {
        acked.set_now(seq as usize);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_run_from_send_and_from_ack_and_the_rate_over_the_span() {
        let origin = Instant::now();
        let (sent, acked) = (Stamps::new(origin, 4), Stamps::new(origin, 4));
        let progress = Progress::new(4, Some(Stamps::new(origin, 4)));
        let leased = progress.leased.as_ref().unwrap();
        let ms = Duration::from_millis;
        // (sent, acked, leased) in ms; task 3 was never leased and is left out.
        for (i, (s, a, l)) in [(1, 3, 6), (11, 13, 12), (21, 23, 1001)]
            .into_iter()
            .enumerate()
        {
            sent.set(i, ms(s));
            acked.set(i, ms(a));
            leased.set(i, ms(l));
        }
        sent.set(3, ms(30));
        acked.set(3, ms(32));

        let l = summarize(None, 4, &sent, &acked, &progress);
        assert_eq!(l.from_send, vec![ms(1), ms(5), ms(980)]);
        // Task 1's lease reply came before its ack: 0, and counted.
        assert_eq!(l.samples, vec![ms(0), ms(3), ms(978)]);
        assert_eq!(l.lease_before_ack, 1);
        assert_eq!(l.span, ms(1000));
        assert!((l.achieved_rate() - 3.0).abs() < 1e-9);
    }
}
