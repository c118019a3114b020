//! `taskbroker-bench-lone`: what one call costs on a quiet broker.
//!
//! One client, one call at a time, no other load: `--calls` rounds of Submit (one
//! task), Lease (one task, no wait) and Complete, each timed from send to reply
//! on this process's monotonic clock. On Postgres it also times the floor the
//! issue compares a Submit with: one INSERT of a row of the same size into a
//! one-index table, committed on its own (autocommit), over the same driver
//! (sqlx) from this process, alternating with the broker's calls so both see the
//! same minute of the machine; and the same INSERT with a `pg_notify` on the
//! broker's channel in the same statement (`insert_notify`), which is what the
//! broker's Submit adds to wake other replicas. `rpc_floor` is a Submit of no
//! tasks, which the broker refuses before any store work: the gRPC round trip
//! through the same layers. Prints p50/p90/p99 per call and one JSON line.
#![forbid(unsafe_code)]

#[path = "broker.rs"]
#[allow(dead_code)]
mod broker;

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::transport::Endpoint;

#[derive(Debug, Parser)]
#[command(name = "taskbroker-bench-lone", version)]
struct Args {
    /// Start `--broker-bin serve` on this database URL, measure it, stop it.
    #[arg(long, value_name = "DATABASE_URL")]
    spawn_broker: String,
    #[arg(long, default_value = "target/release/taskbroker")]
    broker_bin: std::path::PathBuf,
    /// Rounds of Submit, Lease, Complete (and the INSERT floor on Postgres).
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Rounds run first and not counted (connections, prepared statements, caches).
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    #[arg(long, default_value_t = 64)]
    payload_bytes: usize,
}

#[derive(Default)]
struct Samples(Vec<Duration>);

impl Samples {
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_unstable();
        if v.is_empty() {
            return 0.0;
        }
        let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
        v[i].as_secs_f64() * 1000.0
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let spawned = broker::SpawnedBroker::start(&args.broker_bin, &args.spawn_broker).await?;
    let result = measure(&args, &spawned.addr).await;
    spawned.stop().await?;
    let rows = result?;
    let mut json = serde_json::Map::new();
    println!(
        "{:<14} {:>8} {:>8} {:>8}",
        "call", "p50 ms", "p90 ms", "p99 ms"
    );
    for (name, s) in &rows {
        let (p50, p90, p99) = (s.pct(0.5), s.pct(0.9), s.pct(0.99));
        println!("{name:<14} {p50:>8.3} {p90:>8.3} {p99:>8.3}");
        json.insert(
            name.to_string(),
            serde_json::json!({"p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "calls": s.0.len()}),
        );
    }
    let store = if args.spawn_broker.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    };
    json.insert("store".into(), store.into());
    println!("{}", serde_json::Value::Object(json));
    Ok(())
}

async fn measure(args: &Args, addr: &str) -> anyhow::Result<Vec<(&'static str, Samples)>> {
    let channel = Endpoint::from_shared(addr.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut client = BrokerServiceClient::new(channel);
    let floor = if args.spawn_broker.starts_with("postgres") {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&args.spawn_broker)
            .await
            .context("connecting for the INSERT floor")?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS lone_floor (id bigserial PRIMARY KEY, queue text, payload bytea)",
        )
        .execute(&pool)
        .await?;
        Some(pool)
    } else {
        None
    };
    let queue = format!("lone-{}", std::process::id());
    let payload = vec![7u8; args.payload_bytes];
    let (mut submit, mut lease, mut complete, mut insert) = Default::default();
    let mut insert_notify = Samples::default();
    let mut rpc_floor = Samples::default();
    for round in 0..args.warmup + args.calls {
        let counted = round >= args.warmup;
        // The gRPC floor: a Submit the broker refuses before any store work (no
        // tasks: INVALID_ARGUMENT), so one round trip through the same layers.
        let t = Instant::now();
        let refused = client.submit(pb::SubmitRequest { tasks: Vec::new() }).await;
        anyhow::ensure!(
            refused.as_ref().err().map(|s| s.code()) == Some(tonic::Code::InvalidArgument),
            "an empty Submit was not refused: {refused:?}"
        );
        record(&mut rpc_floor, counted, t);
        let t = Instant::now();
        client
            .submit(pb::SubmitRequest {
                tasks: vec![pb::TaskSpec {
                    queue: queue.clone(),
                    payload: payload.clone(),
                    ..Default::default()
                }],
            })
            .await
            .context("Submit")?;
        record(&mut submit, counted, t);
        let t = Instant::now();
        let leased = client
            .lease(pb::LeaseRequest {
                worker_id: "lone".into(),
                queues: vec![queue.clone()],
                max_tasks: 1,
                ..Default::default()
            })
            .await
            .context("Lease")?
            .into_inner()
            .tasks;
        record(&mut lease, counted, t);
        let task = leased
            .into_iter()
            .next()
            .context("Lease returned no task")?;
        let t = Instant::now();
        client
            .complete(pb::CompleteRequest {
                task_id: task.task_id,
                lease_token: task.lease_token,
                ..Default::default()
            })
            .await
            .context("Complete")?;
        record(&mut complete, counted, t);
        if let Some(pool) = &floor {
            let t = Instant::now();
            sqlx::query("INSERT INTO lone_floor (queue, payload) VALUES ($1, $2)")
                .bind(&queue)
                .bind(&payload)
                .execute(pool)
                .await?;
            record(&mut insert, counted, t);
            let t = Instant::now();
            sqlx::query(
                "WITH i AS (INSERT INTO lone_floor (queue, payload) VALUES ($1, $2) RETURNING queue) \
                 SELECT pg_notify('taskbroker', queue) FROM i",
            )
            .bind(&queue)
            .bind(&payload)
            .execute(pool)
            .await?;
            record(&mut insert_notify, counted, t);
        }
    }
    let mut rows = vec![
        ("submit", submit),
        ("lease", lease),
        ("complete", complete),
        ("rpc_floor", rpc_floor),
    ];
    if floor.is_some() {
        rows.push(("insert", insert));
        rows.push(("insert_notify", insert_notify));
    }
    Ok(rows)
}

fn record(s: &mut Samples, counted: bool, since: Instant) {
    if counted {
        s.0.push(since.elapsed());
    }
}
