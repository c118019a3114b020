//! `taskbroker-bench`: a load generator for taskbroker over gRPC.
//!
//! It uses only the generated stubs of `taskbroker-client` (not its worker
//! runtime), so it controls exactly which calls are sent. A run is:
//!
//! 1. `backlog.rs`: optionally pre-load N tasks into a queue nobody leases;
//! 2. `throughput.rs`: P producers submit `--tasks` tasks while W workers
//!    (`workers.rs`, per-task or batched) lease and complete them: lifecycles/s
//!    and submit/s;
//! 3. `latency.rs`: a fixed offered load (default half the measured peak) against
//!    waiting long-poll workers: dispatch latency p50/p99/max;
//! 4. `broker.rs`: the broker's peak RSS (VmHWM), and starting/stopping a broker
//!    with `--spawn-broker`;
//! 5. `report.rs`: a table, then one JSON line;
//! 6. `soak.rs` (`--soak DURATION`, instead of the latency phase): the latency load
//!    for a long time, sampled into a CSV (RSS, dispatch p99, throughput, database size).
//!
//! `rpc.rs` holds the calls themselves and their bounded retries.
#![forbid(unsafe_code)]

// Admission (#14): concurrency keys and queue gates under load.
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
    let spawned = match &args.spawn_broker {
        Some(url) => Some(SpawnedBroker::start(&args.broker_bin, url).await?),
        None => None,
    };
    let addr = spawned
        .as_ref()
        .map_or(args.addr.clone(), |b| b.addr.clone());
    let pid = spawned.as_ref().map(|b| b.pid).or(args.broker_pid);
    let result = measure(args, params, &addr, pid).await;
    if let Some(broker) = spawned {
        broker.stop().await?;
    }
    result
}

async fn measure(
    args: &Args,
    params: args::Params,
    addr: &str,
    pid: Option<u32>,
) -> anyhow::Result<Report> {
    let workers = rpc::connect_many(addr, params.workers).await?;
    let producers = rpc::connect_many(addr, params.producers).await?;
    // Unique queue names, so runs against one long-lived broker never mix.
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let queue = format!("bench-{run_id}");
    let gated = [queue.clone(), format!("{queue}-latency")];
    admission::configure(args, addr, &gated).await?;

    let backlog_load = if params.backlog > 0 {
        let q = format!("{queue}-backlog");
        let took = backlog::preload(
            &producers,
            &q,
            params.backlog,
            params.payload_bytes,
            params.timeout,
        )
        .await?;
        Some(took)
    } else {
        None
    };

    let throughput = throughput::run(&params, &workers, &producers, &queue).await?;
    let latency = if let Some(duration) = args.soak {
        let rate = params
            .latency_rate
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
        None
    } else if params.latency_seconds > 0.0 {
        let rate = params
            .latency_rate
            .unwrap_or(throughput.lifecycles_per_sec() / 2.0);
        let q = format!("{queue}-latency");
        Some(latency::run(&params, rate, &workers, &producers, &q).await?)
    } else {
        None
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
    })
}
