//! Flow: `taskbroker cancel --filter ...` and `taskbroker requeue --queue q
//! --state dead [--dry-run] [--rate N]`, the bulk forms of cancel and requeue.

use crate::pb;

use super::{CliError, Connection, connect, parse, render};

/// The filter flags both bulk commands share.
#[derive(Debug, Clone, clap::Args)]
pub struct BulkArgs {
    /// Filter as KEY=VALUE pairs separated by commas: queue, state (repeatable),
    /// key-prefix, error, created-after, created-before, schedule. E.g.
    /// `--filter queue=emails,state=ready,key-prefix=eu-`.
    #[arg(long)]
    pub filter: Option<String>,
    /// The queue (the same as `queue=` in --filter).
    #[arg(long)]
    pub queue: Option<String>,
    /// Only these states; repeat or separate with commas.
    #[arg(long, value_delimiter = ',', value_parser = parse::state)]
    pub state: Vec<pb::TaskState>,
    /// Only tasks whose last error contains this text.
    #[arg(long)]
    pub error_contains: Option<String>,
    /// Count and show a sample; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// At most this many tasks, oldest first [default: 1000].
    #[arg(long, default_value_t = 0)]
    pub max_tasks: u32,
}

impl BulkArgs {
    /// The selector the flags describe; bad flags are one plain line.
    pub fn selector(&self) -> Result<pb::TaskSelector, CliError> {
        let mut s = pb::TaskSelector {
            queue: self.queue.clone().unwrap_or_default(),
            states: self.state.iter().map(|s| *s as i32).collect(),
            error_contains: self.error_contains.clone().unwrap_or_default(),
            ..Default::default()
        };
        for part in self.filter.iter().flat_map(|f| f.split(',')) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| CliError::Usage(format!("--filter: {part:?} is not KEY=VALUE")))?;
            let time = |v: &str| {
                parse::time_or_delay(v, std::time::SystemTime::now())
                    .map(|t| Some(crate::time::to_proto_timestamp(t)))
                    .map_err(|e| CliError::Usage(format!("--filter {k}: {e}")))
            };
            match k.trim() {
                "queue" => s.queue = v.to_string(),
                "state" => s.states.push(
                    parse::state(v).map_err(|e| CliError::Usage(format!("--filter state: {e}")))?
                        as i32,
                ),
                "key-prefix" | "key_prefix" => s.key_prefix = v.to_string(),
                "error" | "error-contains" => s.error_contains = v.to_string(),
                "created-after" | "created_after" => s.created_after = time(v)?,
                "created-before" | "created_before" => s.created_before = time(v)?,
                "schedule" | "schedule_id" => s.schedule_id = v.to_string(),
                other => {
                    return Err(CliError::Usage(format!(
                        "--filter: unknown key {other:?} (queue, state, key-prefix, error, \
                         created-after, created-before, schedule)"
                    )));
                }
            }
        }
        if s.queue.is_empty() {
            return Err(CliError::Usage(
                "a queue is required: --queue NAME or --filter queue=NAME".into(),
            ));
        }
        Ok(s)
    }
}

fn sample_rows(sample: &[pb::TaskSummary]) -> String {
    let mut out = String::new();
    for t in sample {
        out.push_str(&format!(
            "  {}  {}  {}  {}\n",
            t.task_id,
            render::state(t.state),
            if t.key.is_empty() { "-" } else { &t.key },
            t.last_error
        ));
    }
    out
}

pub async fn cancel(a: &BulkArgs, c: &Connection) -> Result<String, CliError> {
    let req = pb::CancelTasksRequest {
        filter: Some(a.selector()?),
        dry_run: a.dry_run,
        max_tasks: a.max_tasks,
    };
    let r = connect(c).await?.cancel_tasks(req).await?;
    let head = if a.dry_run {
        format!("would cancel {} tasks (dry run)\n", r.matched)
    } else {
        format!(
            "cancelled {}, cancel requested for {} running, of {} matched\n",
            r.cancelled, r.cancel_requested, r.matched
        )
    };
    Ok(head + &sample_rows(&r.sample))
}

pub async fn requeue(a: &BulkArgs, rate: f64, c: &Connection) -> Result<String, CliError> {
    let req = pb::RequeueTasksRequest {
        filter: Some(a.selector()?),
        dry_run: a.dry_run,
        max_tasks: a.max_tasks,
        rate_per_second: rate,
    };
    let r = connect(c).await?.requeue_tasks(req).await?;
    let head = if a.dry_run {
        format!("would requeue {} tasks (dry run)\n", r.matched)
    } else {
        format!("requeued {} of {} matched\n", r.requeued, r.matched)
    };
    Ok(head + &sample_rows(&r.sample))
}
