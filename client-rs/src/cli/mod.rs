//! The client subcommands of the `taskbroker` binary: submit, get, list, cancel,
//! requeue, attempts, stats, `workers` (in `workers.rs`), `schedule ...` (in `schedule.rs`), and `queue ...`
//! and `explain` (in `queue.rs`). The binary flattens [`ClientCommand`] into its own
//! commands and calls [`run`]; a failure is one plain line (`NOT_FOUND: task x not
//! found`) for the binary to print.
//!
//! - `mod.rs` (this file): the commands, their flags and what each does.
//! - `parse.rs`: flag values (durations, times, states).
//! - `render.rs`: tables, detail blocks and JSON.
//! - `relay.rs`: `relay`, which ships a producer's outbox rows to the broker (docs/outbox.md).
//! - `import.rs`: `import`, which drains a legacy task table into tasks (docs/migrating.md).
//! - `submit.rs`: `submit` and `update`.

// Flow: bulk cancel and requeue.
mod bulk;
// `import`: a legacy task table into tasks.
mod import;
mod parse;
mod relay;
// Admission: `queue ...` and `explain`.
mod queue;
// Limit buckets and cooldowns: `bucket ...`, `cooldown ...`.
mod buckets;
mod render;
mod schedule;
// `submit` and `update`.
mod submit;
// Routing.
mod workers;

use std::io::Write;
use std::path::PathBuf;

use serde_json::Value;

pub use submit::{RoutingArgs, SubmitArgs, UpdateArgs};

use crate::pb::TaskState;
use crate::{Client, DEFAULT_ADDR, Error, TaskFilter};

/// Where the broker is; every client subcommand takes it.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// The broker's address: http://HOST:PORT or HOST:PORT.
    #[arg(long, env = "TASKBROKER_ADDR", default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// Bearer token, for a broker with authentication on.
    #[arg(long, env = "TASKBROKER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// CA certificate (PEM) to trust; turns TLS on. An https:// address uses the system roots.
    #[arg(long, env = "TASKBROKER_CA")]
    pub ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM), for a broker that requires mTLS; needs --client-key.
    #[arg(long, env = "TASKBROKER_CLIENT_CERT", requires = "client_key")]
    pub client_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "TASKBROKER_CLIENT_KEY", requires = "client_cert")]
    pub client_key: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum ClientCommand {
    /// Submit a task and print its id.
    Submit(SubmitArgs),
    /// Show one task.
    Get(GetArgs),
    /// List tasks, newest first.
    List(ListArgs),
    /// Cancel a task (or, with --filter/--queue, every task a filter selects); a
    /// running one is asked to stop at its next heartbeat.
    Cancel(CancelArgs),
    /// Make a DEAD or CANCELLED task READY again, with a fresh budget of attempts
    /// (or, with --queue/--filter, every such task a filter selects).
    Requeue(RequeueArgs),
    /// Show every attempt of a task, oldest first.
    Attempts(JsonIdArgs),
    /// Show counts per state and recent throughput per queue.
    Stats(StatsArgs),
    /// Manage schedules: cron, interval and one-off tasks the broker makes.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Ship the rows of an outbox table (in the producer's Postgres or MySQL/MariaDB)
    /// to the broker.
    Relay(relay::RelayArgs),
    /// Drain a legacy task table (in Postgres or MySQL/MariaDB) into tasks, one per
    /// row, keyed by the row's id so a re-run submits nothing twice.
    Import(import::ImportArgs),
    /// List the workers seen recently by any broker, or show one with its leases.
    Workers(workers::WorkersArgs),
    /// Show and change queues' live settings: pause, limits, fairness, aging.
    #[command(subcommand)]
    Queue(queue::QueueCommand),
    /// Show and change limit buckets shared by several queues.
    #[command(subcommand)]
    Bucket(buckets::BucketCommand),
    /// List and lift the cooldowns workers set on keys and buckets.
    #[command(subcommand)]
    Cooldown(buckets::CooldownCommand),
    /// Say why a task is not running (every gate that holds it).
    Explain(JsonIdArgs),
    /// Change run_at, priority, deadline, max_attempts or (while it waits) the target of a
    /// task that is not running.
    Update(UpdateArgs),
    /// Show every recorded event of a task, oldest first.
    Events(JsonIdArgs),
    /// Print task events as they happen (until interrupted).
    Watch(WatchArgs),
}

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Only events of this queue; repeat for more.
    #[arg(long)]
    pub queue: Vec<String>,
    /// Only events of this task; repeat for more.
    #[arg(long)]
    pub task: Vec<String>,
    /// Resume after this event id.
    #[arg(long, default_value_t = 0)]
    pub after: u64,
    /// Print one JSON object per event.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    pub id: String,
    /// Print JSON instead of a readable block.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only these states (scheduled, ready, leased, succeeded, dead, cancelled, blocked);
    /// repeat or separate with commas.
    #[arg(long, value_delimiter = ',', value_parser = parse::state)]
    pub state: Vec<TaskState>,
    /// Only tasks with this key.
    #[arg(long)]
    pub key: Option<String>,
    /// Only tasks made by this schedule.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Only the copies of this fan-out group.
    #[arg(long)]
    pub fanout_group: Option<String>,
    /// Only tasks last leased by this worker id.
    #[arg(long)]
    pub worker: Option<String>,
    /// Only tasks targeted at this worker id.
    #[arg(long)]
    pub target_worker: Option<String>,
    /// Only tasks whose target labels include KEY=VALUE; repeat to require more.
    #[arg(long = "target-label", value_parser = parse::key_value)]
    pub target_labels: Vec<(String, String)>,
    /// Only tasks whose metadata has KEY (any value) or maps KEY to VALUE (KEY=VALUE).
    #[arg(long = "metadata", visible_alias = "meta")]
    pub metadata: Option<String>,
    /// Only tasks created at or after this time: RFC 3339, or a duration meaning
    /// that long ago (`1h`).
    #[arg(long)]
    pub created_after: Option<String>,
    /// Only tasks created before this time: RFC 3339, or a duration meaning that
    /// long ago (`10m`).
    #[arg(long)]
    pub created_before: Option<String>,
    /// At most this many tasks.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct IdArgs {
    pub id: String,
    #[command(flatten)]
    pub connection: Connection,
}

/// Flow: `cancel ID`, or `cancel --filter ...` for many.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The task; leave out to cancel by filter.
    #[arg(required_unless_present_any = ["filter", "queue"])]
    pub id: Option<String>,
    #[command(flatten)]
    pub bulk: bulk::BulkArgs,
    #[command(flatten)]
    pub connection: Connection,
}

/// Flow: `requeue ID`, or `requeue --queue q --state dead` for many.
#[derive(Debug, clap::Args)]
pub struct RequeueArgs {
    /// The task; leave out to requeue by filter.
    #[arg(required_unless_present_any = ["filter", "queue"])]
    pub id: Option<String>,
    #[command(flatten)]
    pub bulk: bulk::BulkArgs,
    /// Release at most this many requeued tasks per second (0: all at once).
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct JsonIdArgs {
    pub id: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Only these queues; repeat for more. Default: every queue with tasks.
    #[arg(long)]
    pub queue: Vec<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

/// Why a command failed; displayed as one plain line.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The broker's status (`NOT_FOUND: ...`) or a connection failure.
    #[error(transparent)]
    Client(#[from] Error),
    /// A flag value that clap's types could not check.
    #[error("{0}")]
    Usage(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
    /// `taskbroker relay`: the outbox database or the broker.
    #[error(transparent)]
    Relay(#[from] crate::outbox::RelayError),
}

/// Runs one client command, printing its answer on standard output.
pub async fn run(cmd: ClientCommand) -> Result<(), CliError> {
    let out = match cmd {
        ClientCommand::Submit(a) => submit::submit(a).await?,
        ClientCommand::Get(a) => {
            let task = connect(&a.connection).await?.get_task(&a.id).await?;
            if a.json {
                json_line(&render::task_json(&task))
            } else {
                render::task_detail(&task)
            }
        }
        ClientCommand::List(a) => list(a).await?,
        ClientCommand::Cancel(CancelArgs {
            id: None,
            bulk,
            connection,
        }) => bulk::cancel(&bulk, &connection).await?,
        ClientCommand::Requeue(RequeueArgs {
            id: None,
            bulk,
            rate,
            connection,
        }) => bulk::requeue(&bulk, rate, &connection).await?,
        ClientCommand::Cancel(CancelArgs {
            id: Some(id),
            connection,
            ..
        }) => {
            let a = IdArgs { id, connection };
            let task = connect(&a.connection).await?.cancel_task(&a.id).await?;
            if task.state() == TaskState::Cancelled {
                format!("cancelled {}\n", task.id)
            } else {
                format!(
                    "cancel requested for {} (running: its worker is told at its next heartbeat)\n",
                    task.id
                )
            }
        }
        ClientCommand::Requeue(RequeueArgs {
            id: Some(id),
            connection,
            ..
        }) => {
            let a = IdArgs { id, connection };
            let task = connect(&a.connection).await?.requeue_task(&a.id).await?;
            format!("requeued {} ({})\n", task.id, render::state(task.state))
        }
        ClientCommand::Attempts(a) => {
            let attempts = connect(&a.connection).await?.list_attempts(&a.id).await?;
            if a.json {
                json_line(&Value::Array(
                    attempts.iter().map(render::attempt_json).collect(),
                ))
            } else {
                render::attempt_rows(&attempts)
            }
        }
        ClientCommand::Stats(a) => {
            let stats = connect(&a.connection).await?.queue_stats(&a.queue).await?;
            if a.json {
                json_line(&Value::Array(
                    stats.iter().map(render::stats_json).collect(),
                ))
            } else {
                render::stats_rows(&stats)
            }
        }
        ClientCommand::Schedule(cmd) => schedule::run(cmd).await?,
        ClientCommand::Relay(a) => relay::run(a).await?,
        ClientCommand::Import(a) => import::run(a).await?,
        ClientCommand::Workers(a) => workers::run(a).await?,
        ClientCommand::Queue(cmd) => queue::run(cmd).await?,
        ClientCommand::Bucket(cmd) => buckets::run_bucket(cmd).await?,
        ClientCommand::Cooldown(cmd) => buckets::run_cooldown(cmd).await?,
        ClientCommand::Update(a) => submit::update(a).await?,
        ClientCommand::Events(a) => {
            let events = connect(&a.connection)
                .await?
                .list_task_events(&a.id)
                .await?;
            if a.json {
                json_line(&Value::Array(
                    events.iter().map(render::event_json).collect(),
                ))
            } else {
                render::event_rows(&events)
            }
        }
        ClientCommand::Watch(a) => return watch(a).await,
        ClientCommand::Explain(a) => {
            let e = connect(&a.connection).await?.explain_task(&a.id).await?;
            if a.json {
                json_line(&queue::explain_json(&e))
            } else {
                queue::explain_text(&e)
            }
        }
    };
    print(&out)
}

async fn connect(c: &Connection) -> Result<Client, Error> {
    client_builder(c)?.connect().await
}

fn client_builder(c: &Connection) -> Result<crate::ClientBuilder, Error> {
    let mut builder = Client::builder(c.addr.clone());
    if let Some(token) = &c.token {
        builder = builder.bearer_token(token);
    }
    if c.ca.is_some() || c.client_cert.is_some() {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| Error::Config(format!("{}: {e}", p.display())))
        };
        let mut tls = crate::tls::ClientTlsConfig::new();
        tls = match &c.ca {
            Some(ca) => tls.ca_certificate(crate::tls::Certificate::from_pem(read(ca)?)),
            None => tls.with_enabled_roots(),
        };
        if let (Some(cert), Some(key)) = (&c.client_cert, &c.client_key) {
            tls = tls.identity(crate::tls::Identity::from_pem(read(cert)?, read(key)?));
        }
        builder = builder.tls_config(tls);
    }
    Ok(builder)
}

fn json_line(v: &Value) -> String {
    format!("{v}\n")
}

/// Writes to standard output; a closed pipe (`| head`) is not an error.
fn print(s: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(s.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Output(e)),
        _ => Ok(()),
    }
}

/// Prints events as they arrive, one line each, until the stream ends.
async fn watch(a: WatchArgs) -> Result<(), CliError> {
    let client = connect(&a.connection).await?;
    let mut stream = client
        .watch_tasks(crate::pb::WatchTasksRequest {
            task_ids: a.task.clone(),
            queues: a.queue.clone(),
            kinds: Vec::new(),
            after_event_id: a.after,
        })
        .await?;
    while let Some(batch) = stream.message().await.map_err(Error::from)? {
        let mut out = String::new();
        for e in &batch.events {
            if a.json {
                out.push_str(&json_line(&render::event_json(e)));
            } else {
                out.push_str(&render::event_line(e));
            }
        }
        print(&out)?;
    }
    Ok(())
}

async fn list(a: ListArgs) -> Result<String, CliError> {
    use futures::{StreamExt, TryStreamExt};
    let mut filter = TaskFilter::new().page_size(a.limit.clamp(1, 1000) as i32);
    if let Some(q) = &a.queue {
        filter = filter.queue(q);
    }
    if let Some(k) = &a.key {
        filter = filter.key(k);
    }
    if let Some(s) = &a.schedule {
        filter = filter.schedule_id(s);
    }
    if let Some(g) = &a.fanout_group {
        filter = filter.fanout_group(g);
    }
    if let Some(w) = &a.worker {
        filter = filter.worker_id(w);
    }
    if let Some(w) = &a.target_worker {
        filter = filter.target_worker(w);
    }
    for (k, v) in &a.target_labels {
        filter = filter.target_label(k, v);
    }
    match a.metadata.as_deref().map(|m| m.split_once('=')) {
        Some(Some((k, v))) => filter = filter.metadata(k, v),
        Some(None) => filter = filter.metadata_key(a.metadata.clone().unwrap_or_default()),
        None => {}
    }
    let now = std::time::SystemTime::now();
    if let Some(t) = &a.created_after {
        filter = filter.created_after(parse::time_or_ago(t, now).map_err(CliError::Usage)?);
    }
    if let Some(t) = &a.created_before {
        filter = filter.created_before(parse::time_or_ago(t, now).map_err(CliError::Usage)?);
    }
    for s in &a.state {
        filter = filter.state(*s);
    }
    let client = connect(&a.connection).await?;
    let tasks: Vec<_> = client
        .list_tasks(filter)
        .take(a.limit)
        .try_collect()
        .await?;
    Ok(if a.json {
        json_line(&Value::Array(tasks.iter().map(render::task_json).collect()))
    } else if tasks.is_empty() {
        "no tasks\n".to_string()
    } else {
        render::task_rows(&tasks)
    })
}
