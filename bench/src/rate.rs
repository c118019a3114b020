//! `taskbroker-bench-rate`: the lease rate a queue's rate limit grants.
//!
//! For each `--rates` value: a fresh queue gets `rate_limit { per_second, burst }`
//! (burst 1 unless `--burst`), enough tasks for the run, and `--lessees`
//! long-polling workers that lease one task at a time (`wait` 1 s) and complete
//! it at once. After `--warmup`, the grants during `--seconds` are counted (the
//! first and last grant time of the window give the rate). Prints one row per
//! rate and one JSON line.
#![forbid(unsafe_code)]

#[path = "broker.rs"]
#[allow(dead_code)]
mod broker;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tokio::sync::Mutex;
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Parser)]
#[command(name = "taskbroker-bench-rate", version)]
struct Args {
    /// Start `--broker-bin serve` on this database URL, measure it, stop it.
    #[arg(long, value_name = "DATABASE_URL")]
    spawn_broker: String,
    #[arg(long, default_value = "target/release/taskbroker")]
    broker_bin: std::path::PathBuf,
    /// Rate limits to measure, leases/s, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "20,50,100")]
    rates: Vec<f64>,
    #[arg(long, default_value_t = 1)]
    burst: u32,
    /// Long-polling workers.
    #[arg(long, default_value_t = 8)]
    lessees: usize,
    /// Seconds counted, per rate.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Seconds run first and not counted, per rate.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let spawned = broker::SpawnedBroker::start(&args.broker_bin, &args.spawn_broker).await?;
    let measured = async {
        let mut rows = Vec::new();
        for &rate in &args.rates {
            rows.push((rate, measure(&args, &spawned.addr, rate).await?));
        }
        anyhow::Ok(rows)
    }
    .await;
    spawned.stop().await?;
    let rows = measured?;
    println!(
        "{:>10} {:>6} {:>8} {:>10} {:>8}",
        "limit/s", "burst", "grants", "granted/s", "of limit"
    );
    let mut json = Vec::new();
    for (rate, (grants, per_second)) in &rows {
        println!(
            "{rate:>10} {:>6} {grants:>8} {per_second:>10.2} {:>7.1}%",
            args.burst,
            per_second / rate * 100.0
        );
        json.push(serde_json::json!({
            "limit": rate, "burst": args.burst, "lessees": args.lessees,
            "grants": grants, "granted_per_second": per_second,
        }));
    }
    println!("{}", serde_json::Value::Array(json));
    Ok(())
}

/// Grants counted and the rate they came at, for one rate limit.
async fn measure(args: &Args, addr: &str, rate: f64) -> anyhow::Result<(usize, f64)> {
    let channel = Endpoint::from_shared(addr.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    let queue = format!("rate-{}", rate.to_string().replace('.', "_"));
    AdminServiceClient::new(channel.clone())
        .update_queue(pb::UpdateQueueRequest {
            name: queue.clone(),
            config: Some(pb::QueueConfig {
                rate_limit: Some(pb::RateLimit {
                    per_second: rate,
                    burst: args.burst,
                }),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["rate_limit".into()],
            }),
        })
        .await?;
    let total = args.warmup + args.seconds;
    let needed = (rate * total * 1.2) as usize + 100;
    let mut producer = BrokerServiceClient::new(channel.clone());
    for chunk in (0..needed).collect::<Vec<_>>().chunks(1000) {
        let tasks = chunk
            .iter()
            .map(|_| pb::TaskSpec {
                queue: queue.clone(),
                payload: b"x".to_vec(),
                ..Default::default()
            })
            .collect();
        producer.submit(pb::SubmitRequest { tasks }).await?;
    }
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let grants: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..args.lessees {
        let (channel, queue) = (channel.clone(), queue.clone());
        let (stop, grants) = (stop.clone(), grants.clone());
        workers.push(tokio::spawn(async move {
            lessee(channel, queue, format!("w{w}"), stop, grants).await
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(total)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await??;
    }
    let from = start + Duration::from_secs_f64(args.warmup);
    let mut times: Vec<Instant> = grants.lock().await.clone();
    times.sort_unstable();
    let counted: Vec<&Instant> = times.iter().filter(|t| **t >= from).collect();
    let per_second = match (counted.first(), counted.last()) {
        (Some(a), Some(b)) if counted.len() > 1 => {
            (counted.len() - 1) as f64 / b.duration_since(**a).as_secs_f64()
        }
        _ => 0.0,
    };
    Ok((counted.len(), per_second))
}

/// Leases one task at a time until `stop`, completing each, recording the
/// time of each grant.
async fn lessee(
    channel: Channel,
    queue: String,
    worker_id: String,
    stop: Arc<AtomicBool>,
    grants: Arc<Mutex<Vec<Instant>>>,
) -> anyhow::Result<()> {
    let mut c = BrokerServiceClient::new(channel);
    while !stop.load(Ordering::Relaxed) {
        let tasks = c
            .lease(pb::LeaseRequest {
                worker_id: worker_id.clone(),
                queues: vec![queue.clone()],
                max_tasks: 1,
                lease_duration: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0,
                }),
                wait: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                labels: Default::default(),
            })
            .await?
            .into_inner()
            .tasks;
        let now = Instant::now();
        for t in tasks {
            grants.lock().await.push(now);
            c.complete(pb::CompleteRequest {
                task_id: t.task_id,
                lease_token: t.lease_token,
                ..Default::default()
            })
            .await?;
        }
    }
    Ok(())
}
