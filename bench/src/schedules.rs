//! `taskbroker-bench-schedules`: fire lag of many schedules that fire at once.
//!
//! Creates `--schedules` schedules (default 10,000), all on the cron line
//! `0 * * * * *` (second 0 of every minute, the worst case: they all fire at the
//! same instant), then for `--minutes` minute boundaries long-polls their tasks
//! with a few workers. The fire lag of a task is when a worker received it minus
//! its fire time (`taskbroker.fire_time`): what a user of the schedule sees.
//! Prints p50/p99/max and one JSON line.
#![forbid(unsafe_code)]

#[path = "broker.rs"]
#[allow(dead_code)]
mod broker;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use taskbroker_client::pb::schedule_service_client::ScheduleServiceClient;
use tokio::sync::Mutex;
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Parser)]
#[command(name = "taskbroker-bench-schedules", version)]
struct Args {
    /// The broker's gRPC address. Ignored with --spawn-broker.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    addr: String,
    /// Start `--broker-bin serve` on this database URL, measure it, stop it.
    #[arg(long, value_name = "DATABASE_URL")]
    spawn_broker: Option<String>,
    #[arg(long, default_value = "target/release/taskbroker")]
    broker_bin: std::path::PathBuf,
    /// Schedules, all firing at second 0 of every minute.
    #[arg(long, default_value_t = 10_000)]
    schedules: usize,
    /// Minute boundaries to measure.
    #[arg(long, default_value_t = 2)]
    minutes: u32,
    /// Long-polling workers (each leases up to 256 tasks per call).
    #[arg(long, default_value_t = 4)]
    workers: usize,
}

const QUEUE: &str = "bench.schedules";

async fn channel(addr: &str) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(addr.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?)
}

async fn create(addr: &str, n: usize) -> anyhow::Result<()> {
    let ch = channel(addr).await?;
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let mut c = ScheduleServiceClient::new(ch.clone());
            async move {
                let s = pb::Schedule {
                    schedule_id: format!("bench-{i:06}"),
                    spec: Some(pb::ScheduleSpec {
                        kind: Some(pb::schedule_spec::Kind::Cron("0 * * * * *".into())),
                        ..Default::default()
                    }),
                    task: Some(pb::TaskTemplate {
                        queue: QUEUE.into(),
                        payload: vec![0; 64],
                        ..Default::default()
                    }),
                    // The tasks stay leased: overlap must not hold back the next fire.
                    overlap: pb::OverlapPolicy::Allow as i32,
                    ..Default::default()
                };
                c.create_schedule(pb::CreateScheduleRequest { schedule: Some(s) })
                    .await
                    .map(|_| ())
                    .map_err(|e| anyhow::anyhow!("create schedule {i}: {e}"))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Long-polls the queue until `until`, recording each task's lag in ms.
async fn work(addr: String, until: SystemTime, lags: Arc<Mutex<Vec<f64>>>) -> anyhow::Result<()> {
    let mut c = BrokerServiceClient::new(channel(&addr).await?);
    while SystemTime::now() < until {
        let r = c
            .lease(pb::LeaseRequest {
                labels: Default::default(),
                worker_id: "bench-schedules".into(),
                queues: vec![QUEUE.into()],
                max_tasks: 256,
                lease_duration: Some(prost_duration(Duration::from_secs(3600))),
                wait: Some(prost_duration(Duration::from_secs(5))),
            })
            .await?
            .into_inner();
        let got = SystemTime::now();
        let mut lags = lags.lock().await;
        for t in r.tasks {
            let fire = t
                .metadata
                .get("taskbroker.fire_time")
                .context("a scheduled task without taskbroker.fire_time")?;
            let fire =
                humantime::parse_rfc3339(fire).with_context(|| format!("fire time {fire:?}"))?;
            let lag = got.duration_since(fire).unwrap_or_default();
            lags.push(lag.as_secs_f64() * 1000.0);
        }
    }
    Ok(())
}

fn prost_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn run(args: &Args) -> anyhow::Result<()> {
    let spawned = match &args.spawn_broker {
        Some(url) => Some(broker::SpawnedBroker::start(&args.broker_bin, url).await?),
        None => None,
    };
    let addr = spawned
        .as_ref()
        .map_or(args.addr.clone(), |b| b.addr.clone());
    let started = std::time::Instant::now();
    create(&addr, args.schedules).await?;
    eprintln!(
        "created {} schedules in {:.1} s",
        args.schedules,
        started.elapsed().as_secs_f64()
    );
    // Measure whole minute boundaries after the schedules exist: up to the
    // (minutes)-th next boundary, plus time for the last fires to arrive.
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH)?;
    let next_minute = (now.as_secs() / 60 + 1) * 60;
    let last = next_minute + 60 * u64::from(args.minutes - 1);
    let until = SystemTime::UNIX_EPOCH + Duration::from_secs(last + 20);
    let lags = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..args.workers)
        .map(|_| tokio::spawn(work(addr.clone(), until, lags.clone())))
        .collect();
    for w in workers {
        w.await??;
    }
    let mut lags = Arc::try_unwrap(lags)
        .map_err(|_| anyhow::anyhow!("workers still hold the results"))?
        .into_inner();
    lags.sort_by(f64::total_cmp);
    let rss = spawned
        .as_ref()
        .map(|b| broker::peak_rss_mb(b.pid))
        .transpose()?;
    if let Some(b) = spawned {
        b.stop().await?;
    }
    let (p50, p99, max) = (
        percentile(&lags, 0.5),
        percentile(&lags, 0.99),
        lags.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "schedules {}  fires {}  fire lag p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms  broker peak RSS {}",
        args.schedules,
        lags.len(),
        p50,
        p99,
        max,
        rss.map_or("-".into(), |r| format!("{r:.0} MiB"))
    );
    println!(
        "{}",
        serde_json::json!({
            "schedules": args.schedules,
            "minutes": args.minutes,
            "fires": lags.len(),
            "fire_lag_ms": {"p50": p50, "p99": p99, "max": max},
            "broker_peak_rss_mb": rss,
        })
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.minutes == 0 {
        eprintln!("taskbroker-bench-schedules: --minutes must be at least 1");
        return std::process::ExitCode::from(2);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    match rt
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run(&args)))
    {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("taskbroker-bench-schedules: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
