//! `submit` and `update`: the flags that make a task or change a waiting one.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::{CliError, Connection, connect, json_line, parse, render};
use crate::TaskSpec;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("body").args(["payload", "json", "file"])))]
pub struct SubmitArgs {
    /// The queue, for example `emails`.
    pub queue: String,
    /// The payload as text.
    #[arg(long)]
    pub payload: Option<String>,
    /// The payload as JSON (checked, then sent as given).
    #[arg(long)]
    pub json: Option<String>,
    /// The payload from a file (`-` reads standard input).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Idempotency key: while a task with this key exists in the queue, it is
    /// returned instead of a new one.
    #[arg(long)]
    pub key: Option<String>,
    /// Higher runs first. Default 0.
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// Do not run before this delay has passed (10s, 5m, 1h).
    #[arg(long, value_parser = parse::duration)]
    pub delay: Option<Duration>,
    /// Must finish by then: an RFC 3339 time or a duration from now.
    #[arg(long)]
    pub deadline: Option<String>,
    /// Attempts in all, counting the first. Default: the broker's.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Metadata entries, NAME=VALUE; repeat for more (also `--meta`).
    #[arg(long = "metadata", visible_alias = "meta", value_parser = parse::key_value)]
    pub metadata: Vec<(String, String)>,
    #[command(flatten)]
    pub routing: RoutingArgs,
    /// Make this many copies (1 to 1000) and print each id (also `--fanout`).
    #[arg(long, visible_alias = "fanout")]
    pub copies: Option<u32>,
    /// With --copies: no worker runs two copies.
    #[arg(long, requires = "copies")]
    pub distinct_workers: bool,
    /// Concurrency key: counts against the queue's per-key limits.
    #[arg(long)]
    pub concurrency_key: Option<String>,
    /// Limit bucket: counts against its limits in every queue.
    #[arg(long)]
    pub bucket: Option<String>,
    /// The checkpoint the first attempt starts from, as text.
    #[arg(long, conflicts_with = "checkpoint_file")]
    pub checkpoint: Option<String>,
    /// The checkpoint from a file (`-` reads standard input).
    #[arg(long)]
    pub checkpoint_file: Option<PathBuf>,
    /// Wait (BLOCKED) until the task with this id has succeeded; repeat for more.
    #[arg(long = "depends-on")]
    pub depends_on: Vec<String>,
    /// Wait until a task with this key exists in that queue and has succeeded,
    /// QUEUE/KEY (as `explain` prints it); repeat for more.
    #[arg(long = "depends-on-key", value_parser = parse::queue_key)]
    pub depends_on_keys: Vec<(String, String)>,
    /// Run even when a dependency ends DEAD or CANCELLED.
    #[arg(long)]
    pub run_if_dependency_fails: bool,
    /// Explicit delays before each retry, e.g. `1m,5m,20m` (the last one repeats).
    #[arg(long, value_delimiter = ',', value_parser = parse::duration)]
    pub retry_schedule: Vec<Duration>,
    /// Lease the task once at most: a lost lease or a failure makes it DEAD.
    #[arg(long)]
    pub at_most_once: bool,
    /// When the key is taken: keep-existing (the default) or replace-waiting
    /// (replace a task that has not started).
    #[arg(long, value_parser = ["keep-existing", "replace-waiting"])]
    pub on_duplicate_key: Option<String>,
    #[command(flatten)]
    pub connection: Connection,
}

/// Which workers may run each task (`submit` and `schedule create`).
#[derive(Debug, clap::Args)]
pub struct RoutingArgs {
    /// Only the worker with this id may run each task.
    #[arg(long)]
    pub target_worker: Option<String>,
    /// Only a worker carrying this label may run each task, KEY=VALUE; repeat
    /// to require more.
    #[arg(long = "target-label", value_parser = parse::key_value)]
    pub target_labels: Vec<(String, String)>,
    /// Keep a retry for the worker that failed it: soft (until --sticky-timeout)
    /// or hard (until the deadline).
    #[arg(long, value_parser = ["soft", "hard"])]
    pub sticky: Option<String>,
    /// How long a soft sticky retry waits for its worker. Default 30s.
    #[arg(long, value_parser = parse::duration, requires = "sticky")]
    pub sticky_timeout: Option<Duration>,
}

impl RoutingArgs {
    /// The sticky policy the flags ask for, if any.
    pub fn sticky(&self) -> Option<crate::Sticky> {
        match self.sticky.as_deref()? {
            "hard" => Some(crate::Sticky::Hard),
            _ => Some(crate::Sticky::Soft(
                self.sticky_timeout.unwrap_or(Duration::from_secs(30)),
            )),
        }
    }

    /// Whether any of the flags is given.
    pub fn any(&self) -> bool {
        self.target_worker.is_some() || !self.target_labels.is_empty() || self.sticky.is_some()
    }
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    pub id: String,
    /// Not leased before then: an RFC 3339 time or a duration from now.
    #[arg(long)]
    pub run_at: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// An RFC 3339 time or a duration from now; `none` clears it.
    #[arg(long)]
    pub deadline: Option<String>,
    /// Attempts in all, counting those made.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// A new target (the task must be waiting): only the worker with this id.
    #[arg(long)]
    pub target_worker: Option<String>,
    /// A new target label, KEY=VALUE; repeat for more (with --target-worker, both hold).
    #[arg(long = "target-label", value_parser = parse::key_value)]
    pub target_labels: Vec<(String, String)>,
    /// Any worker may run the task: its target is cleared.
    #[arg(long, conflicts_with_all = ["target_worker", "target_labels"])]
    pub clear_target: bool,
    /// Print JSON instead of a readable block.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

fn payload(a: &SubmitArgs) -> Result<Vec<u8>, CliError> {
    if let Some(text) = &a.json {
        serde_json::from_str::<Value>(text)
            .map_err(|e| CliError::Usage(format!("--json is not valid JSON: {e}")))?;
        return Ok(text.clone().into_bytes());
    }
    if let Some(path) = &a.file {
        return read_file(path);
    }
    Ok(a.payload.clone().unwrap_or_default().into_bytes())
}

/// A file's bytes; `-` reads standard input.
fn read_file(path: &PathBuf) -> Result<Vec<u8>, CliError> {
    let read = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map(|_| buf)
    } else {
        std::fs::read(path)
    };
    read.map_err(|source| CliError::Read {
        path: path.clone(),
        source,
    })
}

/// The checkpoint `--checkpoint` or `--checkpoint-file` gives, if either.
fn checkpoint(a: &SubmitArgs) -> Result<Option<Vec<u8>>, CliError> {
    if let Some(text) = &a.checkpoint {
        return Ok(Some(text.clone().into_bytes()));
    }
    let stdin = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.as_os_str() == "-");
    if stdin(&a.file) && stdin(&a.checkpoint_file) {
        return Err(CliError::Usage(
            "--file - and --checkpoint-file - cannot both read standard input".into(),
        ));
    }
    a.checkpoint_file.as_ref().map(read_file).transpose()
}

pub(super) async fn submit(a: SubmitArgs) -> Result<String, CliError> {
    let now = SystemTime::now();
    let mut spec = TaskSpec::new(a.queue.clone(), payload(&a)?);
    if let Some(key) = &a.key {
        spec = spec.key(key);
    }
    if let Some(p) = a.priority {
        spec = spec.priority(p);
    }
    if let Some(d) = a.delay {
        spec = spec.run_at(now + d);
    }
    if let Some(d) = &a.deadline {
        spec = spec.deadline(parse::time_or_delay(d, now).map_err(CliError::Usage)?);
    }
    if let Some(n) = a.max_attempts {
        spec = spec.max_attempts(n);
    }
    for (k, v) in &a.metadata {
        spec = spec.metadata(k, v);
    }
    if let Some(w) = &a.routing.target_worker {
        spec = spec.target_worker(w);
    }
    for (k, v) in &a.routing.target_labels {
        spec = spec.target_label(k, v);
    }
    if let Some(sticky) = a.routing.sticky() {
        spec = spec.sticky(sticky);
    }
    if let Some(n) = a.copies {
        spec = spec.fanout(n, a.distinct_workers);
    }
    if let Some(b) = &a.bucket {
        spec = spec.bucket(b);
    }
    if let Some(c) = checkpoint(&a)? {
        spec = spec.checkpoint(c);
    }
    if let Some(k) = &a.concurrency_key {
        spec = spec.concurrency_key(k);
    }
    for id in &a.depends_on {
        spec = spec.depends_on(id);
    }
    for (q, k) in &a.depends_on_keys {
        spec = spec.depends_on_key(q, k);
    }
    if a.run_if_dependency_fails {
        spec = spec.run_if_dependency_fails();
    }
    if !a.retry_schedule.is_empty() {
        spec = spec.retry_schedule(a.retry_schedule.iter().copied());
    }
    if a.at_most_once {
        spec = spec.at_most_once();
    }
    if a.on_duplicate_key.as_deref() == Some("replace-waiting") {
        spec = spec.replace_waiting();
    }
    let submitted = connect(&a.connection).await?.submit(spec).await?;
    if submitted.replaced {
        eprintln!("taskbroker: the waiting task with this key was replaced");
    } else if submitted.deduplicated {
        eprintln!("taskbroker: a task with this key already exists; nothing was created");
    }
    if !submitted.copy_task_ids.is_empty() {
        return Ok(submitted
            .copy_task_ids
            .iter()
            .map(|id| format!("{id}\n"))
            .collect());
    }
    Ok(format!("{}\n", submitted.task_id))
}

pub(super) async fn update(a: UpdateArgs) -> Result<String, CliError> {
    let now = SystemTime::now();
    let mut u = crate::TaskUpdate::new(&a.id);
    if let Some(t) = &a.run_at {
        u = u.run_at(parse::time_or_delay(t, now).map_err(CliError::Usage)?);
    }
    if let Some(p) = a.priority {
        u = u.priority(p);
    }
    if let Some(d) = &a.deadline {
        u = u.deadline(match d.as_str() {
            "none" => None,
            d => Some(parse::time_or_delay(d, now).map_err(CliError::Usage)?),
        });
    }
    if let Some(n) = a.max_attempts {
        u = u.max_attempts(n);
    }
    if let Some(w) = &a.target_worker {
        u = u.target_worker(w);
    }
    for (k, v) in &a.target_labels {
        u = u.target_label(k, v);
    }
    if a.clear_target {
        u = u.clear_target();
    }
    let retarget = a.target_worker.is_some() || !a.target_labels.is_empty() || a.clear_target;
    if a.run_at.is_none()
        && a.priority.is_none()
        && a.deadline.is_none()
        && a.max_attempts.is_none()
        && !retarget
    {
        return Err(CliError::Usage(
            "name at least one of --run-at, --priority, --deadline, --max-attempts, \
             --target-worker, --target-label, --clear-target"
                .into(),
        ));
    }
    let task = connect(&a.connection).await?.update_task(u).await?;
    Ok(if a.json {
        json_line(&render::task_json(&task))
    } else {
        render::task_detail(&task)
    })
}
