//! `taskbroker queue list|get|pause|resume|set|schema` and `taskbroker
//! explain ID` (admission).

use std::time::Duration;

use serde_json::{Value, json};

use super::render::{self, table, time};
use super::{CliError, Connection, connect, json_line, parse};
use crate::QueueUpdate;
use crate::pb::{self, Fairness, GateKind};
use crate::time::from_proto_duration;

#[derive(Debug, clap::Subcommand)]
pub enum QueueCommand {
    /// List every queue with settings or tasks, and its gates.
    List(JsonArgs),
    /// Show a queue's live settings.
    Get(NameArgs),
    /// Stop new leases from a queue now (leases held run on).
    Pause(PlainNameArgs),
    /// Let a paused queue lease again (waiting workers are woken).
    Resume(PlainNameArgs),
    /// Change the settings given as flags; 0 sets a limit back to "none".
    #[command(alias = "update")]
    Set(SetArgs),
    /// Print a queue's payload schema (a JSON Schema document), for code
    /// generators; fails when the queue has none.
    Schema(PlainNameArgs),
}

#[derive(Debug, clap::Args)]
pub struct JsonArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct NameArgs {
    pub name: String,
    /// Print JSON instead of a readable block.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct PlainNameArgs {
    pub name: String,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    pub name: String,
    /// Leases held at once in the cluster (0: no limit).
    #[arg(long)]
    pub max_concurrent: Option<u32>,
    /// Leases per second in the cluster (0: no limit).
    #[arg(long)]
    pub rate_limit: Option<f64>,
    /// Tokens the queue's bucket holds at most (default: one second's worth).
    #[arg(long, requires = "rate_limit")]
    pub burst: Option<u32>,
    /// Leases held at once per concurrency key (0: no limit).
    #[arg(long)]
    pub max_concurrent_per_key: Option<u32>,
    /// Leases per second per concurrency key (0: no limit).
    #[arg(long)]
    pub per_key_rate_limit: Option<f64>,
    /// Tokens each key's bucket holds at most (default: one second's worth).
    #[arg(long, requires = "per_key_rate_limit")]
    pub per_key_burst: Option<u32>,
    /// none, or round-robin-keys (keys take turns).
    #[arg(long, value_parser = fairness)]
    pub fairness: Option<Fairness>,
    /// Each such wait adds 1 to a READY task's priority (0s: off).
    #[arg(long, value_parser = parse::duration)]
    pub priority_aging: Option<Duration>,
    /// Leases one worker holds at once from this queue (0: no limit).
    #[arg(long)]
    pub max_leases_per_worker: Option<u32>,
    /// Attempts in all for tasks that set none (0: the broker's default).
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Lease duration of a Lease that names none (0s: the broker's default).
    #[arg(long, value_parser = parse::duration)]
    pub default_lease: Option<Duration>,
    /// Shortest lease a worker may ask for (0s: the broker's default).
    #[arg(long, value_parser = parse::duration)]
    pub min_lease: Option<Duration>,
    /// Longest lease a worker may ask for (0s: the broker's default).
    #[arg(long, value_parser = parse::duration)]
    pub max_lease: Option<Duration>,
    /// Largest payload Submit accepts (0: the broker's default).
    #[arg(long)]
    pub max_payload_bytes: Option<u64>,
    /// Keep finished tasks this long (0s: keep them for good).
    #[arg(long, value_parser = parse::duration)]
    pub retention: Option<Duration>,
    /// A file holding the JSON Schema every payload must match ("-": stdin).
    #[arg(long, value_name = "FILE", conflicts_with = "clear_payload_schema")]
    pub payload_schema: Option<std::path::PathBuf>,
    /// Drop the queue's payload schema (payloads become opaque bytes again).
    #[arg(long)]
    pub clear_payload_schema: bool,
    /// Print JSON instead of a readable block.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

fn fairness(s: &str) -> Result<Fairness, String> {
    match s {
        "none" => Ok(Fairness::None),
        "round-robin-keys" | "round_robin_keys" => Ok(Fairness::RoundRobinKeys),
        _ => Err(format!("{s:?} is not none or round-robin-keys")),
    }
}

fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// The text of a `--payload-schema` file ("-": standard input).
fn read_schema(path: &std::path::Path) -> Result<String, CliError> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    };
    text.map_err(|source| CliError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn update(a: &SetArgs) -> Result<QueueUpdate, CliError> {
    let mut u = QueueUpdate::new(&a.name);
    if let Some(path) = &a.payload_schema {
        u = u.payload_schema(Some(read_schema(path)?));
    }
    if a.clear_payload_schema {
        u = u.payload_schema(None);
    }
    let rate = |r: f64| (r > 0.0).then_some(r);
    if let Some(n) = a.max_concurrent {
        u = u.max_concurrent(n);
    }
    if let Some(r) = a.rate_limit {
        u = u.rate_limit(rate(r), a.burst.unwrap_or(0));
    }
    if let Some(n) = a.max_concurrent_per_key {
        u = u.max_concurrent_per_key(n);
    }
    if let Some(r) = a.per_key_rate_limit {
        u = u.per_key_rate_limit(rate(r), a.per_key_burst.unwrap_or(0));
    }
    if let Some(f) = a.fairness {
        u = u.fairness(f);
    }
    if let Some(d) = a.priority_aging {
        u = u.priority_aging(nonzero(d));
    }
    if let Some(n) = a.max_leases_per_worker {
        u = u.max_leases_per_worker(n);
    }
    if let Some(n) = a.max_attempts {
        u = u.max_attempts(n);
    }
    if let Some(d) = a.default_lease {
        u = u.default_lease(nonzero(d));
    }
    if let Some(d) = a.min_lease {
        u = u.min_lease(nonzero(d));
    }
    if let Some(d) = a.max_lease {
        u = u.max_lease(nonzero(d));
    }
    if let Some(n) = a.max_payload_bytes {
        u = u.max_payload_bytes(n);
    }
    if let Some(d) = a.retention {
        u = u.retention(Some(d));
    }
    Ok(u)
}

pub async fn run(cmd: QueueCommand) -> Result<String, CliError> {
    Ok(match cmd {
        QueueCommand::List(a) => {
            let queues = connect(&a.connection).await?.list_queues().await?;
            if a.json {
                json_line(&Value::Array(queues.iter().map(queue_json).collect()))
            } else if queues.is_empty() {
                "no queues\n".to_string()
            } else {
                queue_rows(&queues)
            }
        }
        QueueCommand::Get(a) => {
            let q = connect(&a.connection).await?.get_queue(&a.name).await?;
            show(&q, a.json)
        }
        QueueCommand::Pause(a) => {
            let u = QueueUpdate::new(&a.name).paused(true);
            connect(&a.connection).await?.update_queue(u).await?;
            format!("paused {} (leases held run on)\n", a.name)
        }
        QueueCommand::Resume(a) => {
            let u = QueueUpdate::new(&a.name).paused(false);
            connect(&a.connection).await?.update_queue(u).await?;
            format!("resumed {}\n", a.name)
        }
        QueueCommand::Set(a) => {
            let u = update(&a)?;
            if u.is_empty() {
                return Err(CliError::Usage(
                    "name at least one setting to change (see --help)".into(),
                ));
            }
            let q = connect(&a.connection).await?.update_queue(u).await?;
            show(&q, a.json)
        }
        QueueCommand::Schema(a) => {
            let q = connect(&a.connection).await?.get_queue(&a.name).await?;
            let schema = q.config.unwrap_or_default().payload_schema;
            if schema.is_empty() {
                return Err(CliError::Usage(format!(
                    "queue {} has no payload schema",
                    a.name
                )));
            }
            if schema.ends_with('\n') {
                schema
            } else {
                schema + "\n"
            }
        }
    })
}

fn show(q: &pb::Queue, json: bool) -> String {
    if json {
        json_line(&queue_json(q))
    } else {
        queue_detail(q)
    }
}

fn dur(d: &Option<prost_types::Duration>) -> String {
    from_proto_duration(d.as_ref())
        .map(|d| humantime::format_duration(d).to_string())
        .unwrap_or_else(|| "-".into())
}

fn rate(r: &Option<pb::RateLimit>) -> String {
    r.as_ref()
        .map(|r| format!("{}/s (burst {})", r.per_second, r.burst))
        .unwrap_or_else(|| "-".into())
}

fn limit(n: u32) -> String {
    if n == 0 { "-".into() } else { n.to_string() }
}

fn fairness_name(v: i32) -> &'static str {
    match Fairness::try_from(v) {
        Ok(Fairness::RoundRobinKeys) => "round-robin-keys",
        _ => "none",
    }
}

fn queue_rows(queues: &[pb::Queue]) -> String {
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            let c = q.config.clone().unwrap_or_default();
            vec![
                q.name.clone(),
                if c.paused { "paused" } else { "" }.into(),
                limit(c.max_concurrent),
                rate(&c.rate_limit),
                limit(c.max_concurrent_per_key),
                rate(&c.per_key_rate_limit),
                fairness_name(c.fairness).into(),
                dur(&c.priority_aging),
            ]
        })
        .collect();
    table(
        &[
            "QUEUE", "PAUSED", "MAX", "RATE", "PER KEY", "KEY RATE", "FAIRNESS", "AGING",
        ],
        &rows,
    )
}

fn queue_detail(q: &pb::Queue) -> String {
    let c = q.config.clone().unwrap_or_default();
    let retry = c.default_retry.unwrap_or_default();
    let lines = [
        ("queue", q.name.clone()),
        ("paused", c.paused.to_string()),
        ("max_concurrent", limit(c.max_concurrent)),
        ("rate_limit", rate(&c.rate_limit)),
        ("max_concurrent_per_key", limit(c.max_concurrent_per_key)),
        ("per_key_rate_limit", rate(&c.per_key_rate_limit)),
        ("fairness", fairness_name(c.fairness).into()),
        ("priority_aging", dur(&c.priority_aging)),
        ("max_leases_per_worker", limit(c.max_leases_per_worker)),
        ("max_attempts", retry.max_attempts.to_string()),
        ("default_lease", dur(&c.default_lease)),
        (
            "lease",
            format!("{} to {}", dur(&c.min_lease), dur(&c.max_lease)),
        ),
        ("max_payload_bytes", c.max_payload_bytes.to_string()),
        ("retention", dur(&c.retention)),
        ("payload_schema", schema_line(&c.payload_schema)),
        ("updated", {
            let t = time(&q.update_time);
            if t.is_empty() {
                "never (configured)".into()
            } else {
                t
            }
        }),
    ];
    lines.iter().map(|(k, v)| format!("{k:<24}{v}\n")).collect()
}

/// The schema in one line of `queue get`: its size (`queue schema` prints it).
fn schema_line(schema: &str) -> String {
    if schema.is_empty() {
        "-".into()
    } else {
        format!("{} bytes (taskbroker queue schema prints it)", schema.len())
    }
}

fn queue_json(q: &pb::Queue) -> Value {
    let c = q.config.clone().unwrap_or_default();
    let secs = |d: &Option<prost_types::Duration>| {
        from_proto_duration(d.as_ref()).map(|d| d.as_secs_f64())
    };
    let rate = |r: &Option<pb::RateLimit>| {
        r.as_ref()
            .map(|r| json!({"per_second": r.per_second, "burst": r.burst}))
    };
    json!({
        "name": q.name,
        "paused": c.paused,
        "max_concurrent": c.max_concurrent,
        "rate_limit": rate(&c.rate_limit),
        "max_concurrent_per_key": c.max_concurrent_per_key,
        "per_key_rate_limit": rate(&c.per_key_rate_limit),
        "fairness": fairness_name(c.fairness),
        "priority_aging_seconds": secs(&c.priority_aging),
        "max_leases_per_worker": c.max_leases_per_worker,
        "max_attempts": c.default_retry.as_ref().map(|r| r.max_attempts),
        "default_lease_seconds": secs(&c.default_lease),
        "min_lease_seconds": secs(&c.min_lease),
        "max_lease_seconds": secs(&c.max_lease),
        "max_payload_bytes": c.max_payload_bytes,
        "retention_seconds": secs(&c.retention),
        "payload_schema": (!c.payload_schema.is_empty()).then(|| {
            serde_json::from_str::<Value>(&c.payload_schema)
                .unwrap_or_else(|_| Value::String(c.payload_schema.clone()))
        }),
        "update_time": render::time_json(&q.update_time),
    })
}

/// `taskbroker explain ID`: the gates as sentences.
pub fn explain_text(e: &pb::ExplainTaskResponse) -> String {
    let state = render::state(e.state);
    if e.gates.is_empty() {
        return format!(
            "Task {} is {state}: it is not waiting for a lease.\n",
            e.task_id
        );
    }
    let path = lease_path_line(e.lease_path);
    if let [g] = e.gates.as_slice()
        && g.kind == GateKind::None as i32
    {
        return format!(
            "Task {} is {state}: nothing holds it; a worker asking now would get it.\n{path}",
            e.task_id
        );
    }
    let mut out = format!("Task {} is {state} and waits because:\n", e.task_id);
    for g in &e.gates {
        out.push_str(&format!("  - {}\n", gate_sentence(g)));
    }
    out.push_str(&path);
    out
}

/// The rules the lease that takes the task applies, as the leased-tasks
/// metric's `path` label names them; nothing when the server does not say.
fn lease_path_line(path: i32) -> String {
    let what = match pb::LeasePath::try_from(path) {
        Ok(pb::LeasePath::Plain) => "plain (no routing, no gates)",
        Ok(pb::LeasePath::Routed) => "routed (its target, sticky policy or fan-out apply)",
        Ok(pb::LeasePath::Gated) => "gated (its queue's admission gates apply)",
        Ok(pb::LeasePath::Matched) => "matched (handed to a waiting long-poll)",
        _ => return String::new(),
    };
    format!("Lease path: {what}.\n")
}

fn gate_sentence(g: &pb::Gate) -> String {
    let mut s = capitalise(&g.detail);
    if !g.holder_task_ids.is_empty() {
        s.push_str(&format!(
            " (held by task{} {})",
            if g.holder_task_ids.len() == 1 {
                ""
            } else {
                "s"
            },
            g.holder_task_ids.join(", ")
        ));
    }
    let until = time(&g.until);
    if !until.is_empty() {
        let when = match GateKind::try_from(g.kind) {
            Ok(GateKind::RateLimited) => "the next token comes at",
            _ => "until",
        };
        s.push_str(&format!("; {when} {until}"));
    }
    s.push('.');
    s
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

pub fn explain_json(e: &pb::ExplainTaskResponse) -> Value {
    let gates: Vec<Value> = e
        .gates
        .iter()
        .map(|g| {
            json!({
                "kind": GateKind::try_from(g.kind)
                    .map(|k| k.as_str_name())
                    .unwrap_or("GATE_KIND_UNSPECIFIED"),
                "detail": g.detail,
                "until": render::time_json(&g.until),
                "holder_task_ids": g.holder_task_ids,
                "ahead": g.ahead,
            })
        })
        .collect();
    let path = pb::LeasePath::try_from(e.lease_path)
        .map(|p| p.as_str_name())
        .unwrap_or("LEASE_PATH_UNSPECIFIED");
    json!({"task_id": e.task_id, "state": render::state(e.state), "gates": gates, "lease_path": path})
}
