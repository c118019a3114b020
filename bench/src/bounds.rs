//! `taskbroker-bench-bounds`: what the largest Submit the limits allow costs, one
//! request per broker process (docs/performance.md, "Work one Submit may cause").
//!
//! For every request field that multiplies work in Submit (fan-out copies,
//! dependencies by index and by id, target labels, metadata, payload), `--case`
//! picks one request at the limit, or the hostile 1 KB fan-out/dependency request
//! that the limits refuse. The benchmark starts a broker (`--broker-bin serve`) on
//! the given database, sends the setup the case needs, reads the broker's peak
//! resident set (VmHWM) before and after the one measured Submit, times it from
//! send to reply, stops the broker and prints one JSON line.
#![forbid(unsafe_code)]

#[path = "broker.rs"]
#[allow(dead_code)]
mod broker;

use std::collections::HashMap;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use prost::Message;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::transport::Endpoint;

#[derive(Debug, Parser)]
#[command(name = "taskbroker-bench-bounds", version)]
struct Args {
    /// Start `--broker-bin serve` on this database URL (fresh), measure, stop it.
    #[arg(long, value_name = "DATABASE_URL")]
    spawn_broker: String,
    #[arg(long, default_value = "target/release/taskbroker")]
    broker_bin: std::path::PathBuf,
    /// hostile_fanout_deps, edges, join, ids, fanout_bytes, labels, metadata,
    /// metadata_over.
    #[arg(long)]
    case: String,
}

fn fanout(copies: u32) -> pb::TaskSpec {
    pb::TaskSpec {
        queue: "bounds".into(),
        fanout: Some(pb::Fanout {
            copies,
            distinct_workers: false,
        }),
        ..Default::default()
    }
}

fn plain() -> pb::TaskSpec {
    pb::TaskSpec {
        queue: "bounds".into(),
        ..Default::default()
    }
}

/// The measured request; `existing` are ids of tasks made by the setup.
fn request(case: &str, existing: &[String]) -> anyhow::Result<Vec<pb::TaskSpec>> {
    Ok(match case {
        // 500 copies each naming 1,000 times a spec of 500 copies (refused).
        "hostile_fanout_deps" => {
            let mut join = fanout(500);
            join.depends_on_index = vec![0; 1000];
            vec![fanout(500), join]
        }
        // 100 copies each waiting for 100 copies: 10,000 edges.
        "edges" => {
            let mut join = fanout(100);
            join.depends_on_index = vec![0];
            vec![fanout(100), join]
        }
        // One task waiting for 999 copies, named 999 times.
        "join" => {
            let mut join = plain();
            join.depends_on_index = vec![0; 999];
            vec![fanout(999), join]
        }
        // 10 tasks each waiting for 1,000 existing tasks by id: 10,000 edges.
        "ids" => (0..10)
            .map(|_| pb::TaskSpec {
                depends_on: existing.to_vec(),
                ..plain()
            })
            .collect(),
        // 8 copies of a payload of almost 1 MiB: 8 MiB stored.
        "fanout_bytes" => vec![pb::TaskSpec {
            payload: vec![7; (1 << 20) - 16],
            ..fanout(8)
        }],
        // 1,000 copies targeted by 32 labels of the longest key and value.
        "labels" => vec![pb::TaskSpec {
            target: Some(pb::Target {
                worker_id: String::new(),
                labels: (0..32)
                    .map(|i| (format!("{i:0>63}"), "v".repeat(128)))
                    .collect::<HashMap<_, _>>(),
            }),
            ..fanout(1000)
        }],
        // 530 tasks each with 64 metadata entries of 15 KiB in all: 8 MiB.
        "metadata" => (0..530)
            .map(|t| pb::TaskSpec {
                metadata: (0..64)
                    .map(|i| (format!("k{t}-{i:02}"), "m".repeat(240 - 8)))
                    .collect(),
                ..plain()
            })
            .collect(),
        // The same with 1,000 tasks (16 MB, under the 16 MiB message limit):
        // refused for its bytes after it was decoded.
        "metadata_over" => {
            let mut tasks = request("metadata", existing)?;
            let one = tasks[0].clone();
            tasks.extend((530..1000).map(|t| {
                pb::TaskSpec {
                    metadata: one
                        .metadata
                        .iter()
                        .map(|(k, v)| (format!("{k}-{t}"), v.clone()))
                        .collect(),
                    ..plain()
                }
            }));
            tasks
        }
        other => anyhow::bail!("unknown case {other}"),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let spawned = broker::SpawnedBroker::start(&args.broker_bin, &args.spawn_broker).await?;
    let channel = Endpoint::from_shared(spawned.addr.clone())?
        .connect()
        .await
        .context("connecting to the broker")?;
    let mut c = BrokerServiceClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let existing: Vec<String> = if args.case == "ids" {
        c.submit(pb::SubmitRequest {
            tasks: (0..1000).map(|_| plain()).collect(),
        })
        .await?
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.task_id)
        .collect()
    } else {
        // A warm-up call, so the baseline includes the connections a Submit opens.
        c.submit(pb::SubmitRequest {
            tasks: vec![plain()],
        })
        .await?;
        Vec::new()
    };
    let tasks = request(&args.case, &existing)?;
    let req = pb::SubmitRequest { tasks };
    let request_bytes = req.encoded_len();
    let before = broker::peak_rss_mb(spawned.pid)?;
    let start = Instant::now();
    let answer = c.submit(req).await;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let after = broker::peak_rss_mb(spawned.pid)?;
    let (code, tasks) = match &answer {
        Ok(r) => (
            "OK".to_string(),
            r.get_ref()
                .results
                .iter()
                .map(|t| t.copy_task_ids.len().max(1))
                .sum::<usize>(),
        ),
        Err(s) => (format!("{:?}", s.code()), 0),
    };
    spawned.stop().await?;
    println!(
        "{}",
        serde_json::json!({
            "case": args.case,
            "request_bytes": request_bytes,
            "code": code,
            "tasks": tasks,
            "ms": (ms * 10.0).round() / 10.0,
            "peak_rss_mb_before": (before * 10.0).round() / 10.0,
            "peak_rss_mb": (after * 10.0).round() / 10.0,
        })
    );
    Ok(())
}
