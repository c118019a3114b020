//! `taskbroker schedule create|list|get|update|pause|resume|delete|trigger|preview|runs`.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::render::{self, table, time, time_json};
use super::{CliError, Connection, connect, json_line, parse};
use crate::pb::{self, MisfirePolicy, OverlapPolicy};
use crate::time::from_proto_duration;
use crate::{Client, NewSchedule};

#[derive(Debug, clap::Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule: a cron line, an interval or a one-off time, and the task it makes.
    Create(CreateArgs),
    /// List schedules by id.
    List(JsonArgs),
    /// Show one schedule.
    Get(IdJsonArgs),
    /// Change the fields given as flags.
    Update(CreateArgs),
    /// Stop firing until resumed.
    Pause(IdArgs),
    /// Fire again; fire times that passed while paused are skipped.
    Resume(IdArgs),
    /// Delete a schedule and its run history (tasks already made stay).
    Delete(IdArgs),
    /// Fire once now, outside the spec.
    Trigger(IdArgs),
    /// Show the next fire times of a spec, creating nothing.
    Preview(PreviewArgs),
    /// Show the run history, newest first: fire time, task, the task's state.
    Runs(RunsArgs),
}

/// When it fires.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("spec").args(["cron", "every", "at"])))]
pub struct SpecArgs {
    /// A cron line of 5 fields, or 6 with seconds first: "0 3 * * *".
    #[arg(long)]
    pub cron: Option<String>,
    /// The IANA time zone of the cron line, e.g. Europe/Berlin. Default UTC.
    #[arg(long)]
    pub tz: Option<String>,
    /// An interval (at least 1s): 30s, 5m, 1h.
    #[arg(long, value_parser = parse::duration)]
    pub every: Option<Duration>,
    /// Once, at an RFC 3339 time or after a delay (10m).
    #[arg(long)]
    pub at: Option<String>,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("body").args(["payload", "json", "file"])))]
pub struct CreateArgs {
    pub id: String,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// The queue of the tasks it makes.
    #[arg(long)]
    pub queue: Option<String>,
    /// The payload as text.
    #[arg(long)]
    pub payload: Option<String>,
    /// The payload as JSON (checked, then sent as given).
    #[arg(long)]
    pub json: Option<String>,
    /// The payload from a file.
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// Metadata entries, NAME=VALUE; repeat for more.
    #[arg(long = "meta", value_parser = parse::key_value)]
    pub metadata: Vec<(String, String)>,
    /// Each task must finish this long after it is made (30m).
    #[arg(long, value_parser = parse::duration)]
    pub deadline_after: Option<Duration>,
    #[command(flatten)]
    pub routing: super::RoutingArgs,
    /// Each fire makes this many copies (also `--copies`).
    #[arg(long, visible_alias = "copies")]
    pub fanout: Option<u32>,
    /// With --fanout: no worker runs two copies of one fire.
    #[arg(long, requires = "fanout")]
    pub distinct_workers: bool,
    /// The concurrency key of each task it makes.
    #[arg(long)]
    pub concurrency_key: Option<String>,
    /// The key of each task it makes, with {fire_time} and {schedule_id}
    /// substituted ("report-{fire_time}"); a fire whose key is taken makes none.
    #[arg(long)]
    pub key: Option<String>,
    /// Nothing fires before this time (RFC 3339 or a delay).
    #[arg(long)]
    pub start: Option<String>,
    /// Nothing fires after this time; the schedule completes then.
    #[arg(long)]
    pub end: Option<String>,
    /// While the previous run is unfinished: allow, skip, buffer-one, cancel-previous.
    #[arg(long, value_parser = overlap)]
    pub overlap: Option<OverlapPolicy>,
    /// Fire times missed while no broker ran: skip, fire-once, catch-up.
    #[arg(long, value_parser = misfire)]
    pub misfire: Option<MisfirePolicy>,
    /// How far back catch-up goes (default 1h).
    #[arg(long, value_parser = parse::duration)]
    pub catchup_window: Option<Duration>,
    /// Stop after this many runs.
    #[arg(long)]
    pub max_runs: Option<u32>,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    #[command(flatten)]
    pub connection: Connection,
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
pub struct IdJsonArgs {
    pub id: String,
    /// Print JSON instead of a readable block.
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

#[derive(Debug, clap::Args)]
pub struct PreviewArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    /// How many fire times.
    #[arg(short = 'n', long, default_value_t = 10)]
    pub count: i32,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    pub id: String,
    /// At most this many runs.
    #[arg(long, default_value_t = 50)]
    pub limit: i32,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

fn overlap(s: &str) -> Result<OverlapPolicy, String> {
    let name = format!(
        "OVERLAP_POLICY_{}",
        s.trim().replace('-', "_").to_ascii_uppercase()
    );
    match OverlapPolicy::from_str_name(&name) {
        Some(OverlapPolicy::Unspecified) | None => Err(format!(
            "{s:?} is not an overlap policy (allow, skip, buffer-one, cancel-previous)"
        )),
        Some(p) => Ok(p),
    }
}

fn misfire(s: &str) -> Result<MisfirePolicy, String> {
    let name = format!(
        "MISFIRE_POLICY_{}",
        s.trim().replace('-', "_").to_ascii_uppercase()
    );
    match MisfirePolicy::from_str_name(&name) {
        Some(MisfirePolicy::Unspecified) | None => Err(format!(
            "{s:?} is not a misfire policy (skip, fire-once, catch-up)"
        )),
        Some(p) => Ok(p),
    }
}

/// The spec the flags give, if any.
fn spec(a: &SpecArgs, now: SystemTime) -> Result<Option<pb::ScheduleSpec>, CliError> {
    let tz = a.tz.clone().unwrap_or_default();
    Ok(match (&a.cron, a.every, &a.at) {
        (Some(line), _, _) => Some(NewSchedule::cron_spec(line, tz)),
        (_, Some(d), _) => Some(NewSchedule::every_spec(d)),
        (_, _, Some(at)) => Some(NewSchedule::once_spec(
            parse::time_or_delay(at, now).map_err(CliError::Usage)?,
        )),
        _ if a.tz.is_some() => return Err(CliError::Usage("--tz goes with --cron".into())),
        _ => None,
    })
}

fn payload(a: &CreateArgs) -> Result<Option<Vec<u8>>, CliError> {
    if let Some(text) = &a.json {
        serde_json::from_str::<Value>(text)
            .map_err(|e| CliError::Usage(format!("--json is not valid JSON: {e}")))?;
        return Ok(Some(text.clone().into_bytes()));
    }
    if let Some(path) = &a.file {
        return std::fs::read(path)
            .map(Some)
            .map_err(|source| CliError::Read {
                path: path.clone(),
                source,
            });
    }
    Ok(a.payload.clone().map(String::into_bytes))
}

/// The schedule the flags describe and the field paths they set.
fn build(a: &CreateArgs) -> Result<(NewSchedule, Vec<&'static str>), CliError> {
    let now = SystemTime::now();
    let mut paths = Vec::new();
    let mut s = match spec(&a.spec, now)? {
        Some(sp) => {
            paths.push("spec");
            NewSchedule::with_spec(&a.id, sp)
        }
        None => NewSchedule::for_update(&a.id),
    };
    let task_flags = a.queue.is_some()
        || a.payload.is_some()
        || a.json.is_some()
        || a.file.is_some()
        || a.priority.is_some()
        || !a.metadata.is_empty()
        || a.deadline_after.is_some()
        || a.routing.any()
        || a.fanout.is_some()
        || a.concurrency_key.is_some()
        || a.key.is_some();
    if task_flags {
        paths.push("task");
    }
    if let Some(q) = &a.queue {
        s = s.queue(q);
    }
    if let Some(p) = payload(a)? {
        s = s.payload(p);
    }
    if let Some(p) = a.priority {
        s = s.priority(p);
    }
    for (k, v) in &a.metadata {
        s = s.metadata(k, v);
    }
    if let Some(d) = a.deadline_after {
        s = s.deadline_after(d);
    }
    if let Some(w) = &a.routing.target_worker {
        s = s.target_worker(w);
    }
    for (k, v) in &a.routing.target_labels {
        s = s.target_label(k, v);
    }
    if let Some(sticky) = a.routing.sticky() {
        s = s.sticky(sticky);
    }
    if let Some(n) = a.fanout {
        s = s.fanout(n, a.distinct_workers);
    }
    if let Some(k) = &a.concurrency_key {
        s = s.concurrency_key(k);
    }
    if let Some(k) = &a.key {
        s = s.key(k);
    }
    let time = |v: &str| parse::time_or_delay(v, now).map_err(CliError::Usage);
    if let Some(t) = &a.start {
        s = s.start_time(time(t)?);
        paths.push("start_time");
    }
    if let Some(t) = &a.end {
        s = s.end_time(time(t)?);
        paths.push("end_time");
    }
    if let Some(p) = a.overlap {
        s = s.overlap(p);
        paths.push("overlap");
    }
    if let Some(p) = a.misfire {
        s = s.misfire(p);
        paths.push("misfire");
    }
    if let Some(d) = a.catchup_window {
        s = s.catchup_window(d);
        paths.push("catchup_window");
    }
    if let Some(n) = a.max_runs {
        s = s.max_runs(n);
        paths.push("max_runs");
    }
    if a.paused {
        s = s.paused(true);
        paths.push("paused");
    }
    Ok((s, paths))
}

fn policy_name(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix)
        .unwrap_or(name)
        .to_ascii_lowercase()
        .replace('_', "-")
}

fn state(s: &pb::Schedule) -> String {
    policy_name(s.state().as_str_name(), "SCHEDULE_STATE_")
}

fn spec_text(s: &pb::Schedule) -> String {
    use pb::schedule_spec::Kind;
    let Some(spec) = &s.spec else {
        return String::new();
    };
    match &spec.kind {
        Some(Kind::Cron(line)) if spec.timezone.is_empty() => format!("cron {line}"),
        Some(Kind::Cron(line)) => format!("cron {line} ({})", spec.timezone),
        Some(Kind::Every(d)) => {
            let d = from_proto_duration(Some(d)).unwrap_or_default();
            format!("every {}", humantime::format_duration(d))
        }
        Some(Kind::OnceAt(t)) => format!("once at {}", time(&Some(*t))),
        None => String::new(),
    }
}

fn schedule_json(s: &pb::Schedule) -> Value {
    let t = s.task.as_ref();
    json!({
        "schedule_id": s.schedule_id,
        "spec": spec_text(s),
        "queue": s.task.as_ref().map(|t| t.queue.clone()).unwrap_or_default(),
        "state": state(s),
        "state_reason": s.state_reason,
        "overlap": policy_name(s.overlap().as_str_name(), "OVERLAP_POLICY_"),
        "misfire": policy_name(s.misfire().as_str_name(), "MISFIRE_POLICY_"),
        "max_runs": s.max_runs,
        "runs": s.runs,
        "next_fire_at": time_json(&s.next_fire_at),
        "last_fire_at": time_json(&s.last_fire_at),
        "start_time": time_json(&s.start_time),
        "end_time": time_json(&s.end_time),
        "created_at": time_json(&s.created_at),
        "target_worker": t.and_then(|t| t.target.as_ref()).map(|x| x.worker_id.clone()).unwrap_or_default(),
        "target_labels": t.and_then(|t| t.target.as_ref()).filter(|x| !x.labels.is_empty())
            .map(|x| x.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")),
        "fanout": t.and_then(|t| t.fanout.as_ref()).filter(|f| f.copies > 1).map(|f| f.copies),
        "concurrency_key": t.map(|t| t.concurrency_key.clone()).unwrap_or_default(),
        "key": t.map(|t| t.key.clone()).unwrap_or_default(),
    })
}

fn schedule_detail(s: &pb::Schedule) -> String {
    let v = schedule_json(s);
    let mut out = String::new();
    if let Value::Object(m) = v {
        for (k, v) in m {
            let text = match v {
                Value::String(s) => s,
                Value::Null => continue,
                other => other.to_string(),
            };
            if !text.is_empty() {
                out.push_str(&format!("{k:<14}{text}\n"));
            }
        }
    }
    out
}

fn schedule_rows(list: &[pb::Schedule]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            vec![
                s.schedule_id.clone(),
                spec_text(s),
                s.task.as_ref().map(|t| t.queue.clone()).unwrap_or_default(),
                state(s),
                s.runs.to_string(),
                time(&s.next_fire_at),
            ]
        })
        .collect();
    table(
        &["ID", "SPEC", "QUEUE", "STATE", "RUNS", "NEXT FIRE"],
        &rows,
    )
}

fn run_json(r: &pb::ScheduleRun) -> Value {
    json!({
        "fire_time": time_json(&r.fire_time),
        "task_id": r.task_id,
        "task_state": if r.task_state == 0 { "deleted" } else { render::state(r.task_state) },
        "triggered": r.triggered,
    })
}

async fn client(c: &Connection) -> Result<Client, CliError> {
    Ok(connect(c).await?)
}

pub async fn run(cmd: ScheduleCommand) -> Result<String, CliError> {
    Ok(match cmd {
        ScheduleCommand::Create(a) => {
            let (s, _) = build(&a)?;
            let s = client(&a.connection).await?.schedules().create(s).await?;
            match &s.next_fire_at {
                Some(_) => format!(
                    "created {}; next fire {}\n",
                    s.schedule_id,
                    time(&s.next_fire_at)
                ),
                None => format!("created {} ({})\n", s.schedule_id, state(&s)),
            }
        }
        ScheduleCommand::Update(a) => {
            let (s, paths) = build(&a)?;
            if paths.is_empty() {
                return Err(CliError::Usage("give at least one field to change".into()));
            }
            let s = client(&a.connection)
                .await?
                .schedules()
                .update(s, &paths)
                .await?;
            schedule_detail(&s)
        }
        ScheduleCommand::List(a) => {
            use futures::TryStreamExt;
            let list: Vec<_> = client(&a.connection)
                .await?
                .schedules()
                .list()
                .try_collect()
                .await?;
            if a.json {
                json_line(&Value::Array(list.iter().map(schedule_json).collect()))
            } else if list.is_empty() {
                "no schedules\n".to_string()
            } else {
                schedule_rows(&list)
            }
        }
        ScheduleCommand::Get(a) => {
            let s = client(&a.connection).await?.schedules().get(&a.id).await?;
            if a.json {
                json_line(&schedule_json(&s))
            } else {
                schedule_detail(&s)
            }
        }
        ScheduleCommand::Pause(a) => {
            client(&a.connection)
                .await?
                .schedules()
                .pause(&a.id)
                .await?;
            format!("paused {}\n", a.id)
        }
        ScheduleCommand::Resume(a) => {
            let s = client(&a.connection)
                .await?
                .schedules()
                .resume(&a.id)
                .await?;
            format!("resumed {}; next fire {}\n", a.id, time(&s.next_fire_at))
        }
        ScheduleCommand::Delete(a) => {
            client(&a.connection)
                .await?
                .schedules()
                .delete(&a.id)
                .await?;
            format!("deleted {}\n", a.id)
        }
        ScheduleCommand::Trigger(a) => {
            let r = client(&a.connection)
                .await?
                .schedules()
                .trigger(&a.id)
                .await?;
            format!("{}\n", r.task_id)
        }
        ScheduleCommand::Preview(a) => {
            let sp = spec(&a.spec, SystemTime::now())?
                .ok_or_else(|| CliError::Usage("give --cron, --every or --at".into()))?;
            let times = client(&a.connection)
                .await?
                .schedules()
                .preview(sp, a.count)
                .await?;
            let shown: Vec<String> = times
                .iter()
                .map(|t| humantime::format_rfc3339_seconds(*t).to_string())
                .collect();
            if a.json {
                json_line(&json!(shown))
            } else {
                shown.iter().map(|t| format!("{t}\n")).collect()
            }
        }
        ScheduleCommand::Runs(a) => {
            let runs = client(&a.connection)
                .await?
                .schedules()
                .runs(&a.id, a.limit)
                .await?;
            if a.json {
                json_line(&Value::Array(runs.iter().map(run_json).collect()))
            } else if runs.is_empty() {
                "no runs\n".to_string()
            } else {
                let rows: Vec<Vec<String>> = runs
                    .iter()
                    .map(|r| {
                        let v = run_json(r);
                        vec![
                            time(&r.fire_time),
                            r.task_id.clone(),
                            v["task_state"].as_str().unwrap_or_default().to_string(),
                            if r.triggered { "trigger" } else { "" }.to_string(),
                        ]
                    })
                    .collect();
                table(&["FIRE TIME", "TASK", "STATE", ""], &rows)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_by_short_name() {
        assert_eq!(overlap("buffer-one").unwrap(), OverlapPolicy::BufferOne);
        assert_eq!(misfire("CATCH_UP").unwrap(), MisfirePolicy::CatchUp);
        assert!(overlap("never").is_err());
        assert!(misfire("unspecified").is_err());
    }
}
