//! `taskbroker-bench`: a load generator for taskbroker over gRPC.
//!
//! It uses only the generated stubs of `taskbroker-client` (not its worker
//! runtime), so it controls exactly which calls are sent. A run is:
//!
//! 1. `backlog.rs`: optionally pre-load N tasks into a queue nobody leases;
//! 2. `throughput.rs`: P producers submit `--tasks` tasks while W workers
//!    (`workers.rs`, per-task or batched) lease and complete them: lifecycles/s
//!    and submit/s;
//! 3. `latency.rs`: fixed offered loads (`--latency-rate`, default half the
//!    measured peak; an open loop each) and optionally a closed loop
//!    (`--closed-loop`, one task at a time) against waiting long-poll workers:
//!    dispatch latency p50/p99/max;
//! 4. `broker.rs`: the broker's peak RSS (VmHWM), and starting/stopping a broker
//!    with `--spawn-broker` (`--replicas N` of them on one Postgres database, the
//!    clients' connections spread across them);
//! 5. `report.rs`: a table, then one JSON line;
//! 6. `soak.rs` (`--soak DURATION`, instead of the latency phase): the latency load
//!    for a long time, sampled into a CSV (RSS, dispatch p99, throughput, database size).
//!
//! `rpc.rs` holds the calls themselves and their bounded retries.
#![forbid(unsafe_code)]

// Admission: concurrency keys and queue gates under load.
mod admission;
mod args;
mod backlog;
mod broker;
mod latency;
mod report;
mod rpc;
mod soak;
mod throughput;
mod workers;

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Parser;

use args::Args;
use broker::SpawnedBroker;
use report::Report;

fn main() -> ExitCode {
    let args = Args::parse();
    let params = match args.params() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("taskbroker-bench: {e}");
            return ExitCode::from(2);
        }
    };
    rpc::set_targeted(args.targeted);
    rpc::set_keyed(args.keyed);
    rpc::set_lease_next(args.lease_next());
    // The machine this targets has few cores; the broker and its database need
    // them more than the load generator does, so two runtime threads are enough.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let result = runtime
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run(&args, params)));
    match result {
        Ok(report) => {
            print!("{}", report.table());
            println!("{}", report.json());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("taskbroker-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, params: args::Params) -> anyhow::Result<Report> {
    let mut spawned = Vec::new();
    if let Some(url) = &args.spawn_broker {
        // The first replica runs the migrations; the others start on a migrated database.
        spawned.push(SpawnedBroker::start(&args.broker_bin, url).await?);
        let others = (1..params.replicas).map(|_| SpawnedBroker::start(&args.broker_bin, url));
        spawned.extend(futures::future::try_join_all(others).await?);
    }
    let addrs: Vec<String> = if spawned.is_empty() {
        vec![args.addr.clone()]
    } else {
        spawned.iter().map(|b| b.addr.clone()).collect()
    };
    let pid = spawned.first().map(|b| b.pid).or(args.broker_pid);
    let result = measure(args, params, &addrs, pid).await;
    for broker in spawned {
        broker.stop().await?;
    }
    result
}

async fn measure(
    args: &Args,
    params: args::Params,
    addrs: &[String],
    pid: Option<u32>,
) -> anyhow::Result<Report> {
    let workers = rpc::connect_many(addrs, params.workers).await?;
    let producers = rpc::connect_many(addrs, params.producers).await?;
    // Unique queue names, so runs against one long-lived broker never mix.
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let queue = format!("bench-{run_id}");
    let gated = [queue.clone(), format!("{queue}-latency")];
    admission::configure(args, &addrs[0], &gated).await?;

    let backlog_load = if params.backlog > 0 {
        let q = format!("{queue}-backlog");
        let took = backlog::preload(
            &producers,
            &q,
            params.backlog,
            params.payload_bytes,
            params.timeout,
            false,
        )
        .await?;
        Some(took)
    } else {
        None
    };

    if params.future_backlog > 0 {
        for q in &gated {
            backlog::preload(
                &producers,
                q,
                params.future_backlog,
                params.payload_bytes,
                params.timeout,
                true,
            )
            .await?;
        }
    }

    let cpu_before = pid.and_then(broker::cpu_seconds);
    let db_before = args.db_pid.and_then(broker::tree_cpu_seconds);
    let throughput = throughput::run(&params, &workers, &producers, &queue).await?;
    let broker_cpu_s = match (cpu_before, pid.and_then(broker::cpu_seconds)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let db_cpu_s = match (db_before, args.db_pid.and_then(broker::tree_cpu_seconds)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let latency = if let Some(duration) = args.soak {
        let rate = params
            .latency_rates
            .first()
            .copied()
            .unwrap_or(throughput.lifecycles_per_sec() / 2.0);
        let db = soak::Database::open(args.spawn_broker.as_deref()).await?;
        let every = std::time::Duration::from_secs_f64(args.soak_sample_seconds);
        let q = format!("{queue}-soak");
        eprintln!("soak: {rate:.0} tasks/s for {duration:?}, a sample every {every:?}");
        let s = soak::run(
            &params,
            rate,
            duration,
            every,
            &workers,
            &producers,
            &q,
            pid,
            &db,
            &args.soak_csv,
        )
        .await?;
        eprintln!("soak: {} samples in {}", s.samples, s.csv.display());
        Vec::new()
    } else if params.latency_seconds > 0.0 {
        let mut loops = Vec::new();
        if params.closed_loop {
            let q = format!("{queue}-closed");
            loops.push(latency::run_closed(&params, &workers, &producers, &q).await?);
        }
        let rates = match params.latency_rates.as_slice() {
            [] => vec![throughput.lifecycles_per_sec() / 2.0],
            rates => rates.to_vec(),
        };
        // A queue per loop, so no loop sees another's tasks.
        for (i, rate) in rates.into_iter().enumerate() {
            let q = format!("{queue}-latency-{i}");
            loops.push(latency::run(&params, rate, &workers, &producers, &q).await?);
        }
        loops
    } else {
        Vec::new()
    };
    let broker_rss_mb = pid.map(broker::peak_rss_mb).transpose()?;
    Ok(Report {
        params,
        label: args.label.clone(),
        store: args.store(),
        backlog_load,
        throughput,
        latency,
        broker_pid: pid,
        broker_rss_mb,
        broker_cpu_s,
        db_cpu_s,
    })
}
