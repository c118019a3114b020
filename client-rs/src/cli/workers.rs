//! `taskbroker workers` (routing): the workers any broker replica saw
//! within its `worker_ttl`, or one worker with the leases it holds.

use serde_json::{Value, json};

use super::render::{table, time, time_json};
use super::{CliError, Connection, connect, json_line, parse};
use crate::{WorkerFilter, pb};

#[derive(Debug, clap::Args)]
pub struct WorkersArgs {
    /// Show this worker and its current leases instead of the list.
    pub id: Option<String>,
    /// Only workers leasing from this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only workers carrying this label, KEY=VALUE; repeat to require more.
    #[arg(long = "label", value_parser = parse::key_value)]
    pub labels: Vec<(String, String)>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

pub async fn run(a: WorkersArgs) -> Result<String, CliError> {
    let client = connect(&a.connection).await?;
    if let Some(id) = &a.id {
        let (w, leases) = client.get_worker(id).await?;
        return Ok(if a.json {
            let mut v = worker_json(&w);
            v["leases"] = Value::Array(leases.iter().map(lease_json).collect());
            json_line(&v)
        } else {
            detail(&w, &leases)
        });
    }
    let mut filter = WorkerFilter::new().page_size(1000);
    if let Some(q) = &a.queue {
        filter = filter.queue(q);
    }
    for (k, v) in &a.labels {
        filter = filter.label(k, v);
    }
    let workers = client.list_workers(&filter).await?;
    Ok(if a.json {
        json_line(&Value::Array(workers.iter().map(worker_json).collect()))
    } else if workers.is_empty() {
        "no workers seen recently\n".to_string()
    } else {
        rows(&workers)
    })
}

fn labels(w: &pb::Worker) -> String {
    let mut pairs: Vec<String> = w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(",")
}

fn rows(workers: &[pb::Worker]) -> String {
    let rows: Vec<Vec<String>> = workers
        .iter()
        .map(|w| {
            vec![
                w.worker_id.clone(),
                w.address.clone(),
                w.queues.join(","),
                labels(w),
                w.leases_held.to_string(),
                format!("{}/{}", w.completed_last_minute, w.failed_last_minute),
                time(&w.last_seen),
            ]
        })
        .collect();
    table(
        &[
            "WORKER",
            "ADDRESS",
            "QUEUES",
            "LABELS",
            "LEASES",
            "DONE/FAILED 1M",
            "LAST SEEN",
        ],
        &rows,
    )
}

fn detail(w: &pb::Worker, leases: &[pb::WorkerLease]) -> String {
    let mut out = format!(
        "worker      {}\naddress     {}\nqueues      {}\nlabels      {}\nfirst seen  {}\nlast seen   {}\nleases      {}\nlast minute {} completed, {} failed\n",
        w.worker_id,
        w.address,
        w.queues.join(","),
        labels(w),
        time(&w.first_seen),
        time(&w.last_seen),
        w.leases_held,
        w.completed_last_minute,
        w.failed_last_minute,
    );
    if !leases.is_empty() {
        let rows: Vec<Vec<String>> = leases
            .iter()
            .map(|l| {
                vec![
                    l.task_id.clone(),
                    l.queue.clone(),
                    l.attempt.to_string(),
                    time(&l.leased_at),
                    time(&l.lease_expires_at),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &["TASK", "QUEUE", "ATTEMPT", "LEASED", "EXPIRES"],
            &rows,
        ));
    }
    out
}

fn worker_json(w: &pb::Worker) -> Value {
    json!({
        "worker_id": w.worker_id,
        "address": w.address,
        "queues": w.queues,
        "labels": w.labels,
        "first_seen": time_json(&w.first_seen),
        "last_seen": time_json(&w.last_seen),
        "leases_held": w.leases_held,
        "completed_last_minute": w.completed_last_minute,
        "failed_last_minute": w.failed_last_minute,
    })
}

fn lease_json(l: &pb::WorkerLease) -> Value {
    json!({
        "task_id": l.task_id,
        "queue": l.queue,
        "attempt": l.attempt,
        "leased_at": time_json(&l.leased_at),
        "lease_expires_at": time_json(&l.lease_expires_at),
    })
}
