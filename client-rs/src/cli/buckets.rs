//! `taskbroker bucket list|get|set|delete` (limit buckets shared by several
//! queues) and `taskbroker cooldown list|lift` (the cooldowns workers set).

use serde_json::{Value, json};

use super::render::{table, time, time_json};
use super::{CliError, Connection, connect, json_line};
use crate::pb;
use crate::{BucketUpdate, CooldownOf};

#[derive(Debug, clap::Subcommand)]
pub enum BucketCommand {
    /// List every defined bucket with its limits and use now.
    List(ListArgs),
    /// Show one bucket's limits and use now.
    Get(NameArgs),
    /// Define a bucket or change the limits given as flags (0: no limit).
    Set(SetArgs),
    /// Remove a bucket; its tasks lease without its limits.
    Delete(NameArgs),
}

#[derive(Debug, clap::Subcommand)]
pub enum CooldownCommand {
    /// List the live cooldowns.
    List(CooldownListArgs),
    /// End a cooldown now: `--queue Q --key K`, or `--bucket B`.
    Lift(LiftArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
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
pub struct SetArgs {
    pub name: String,
    /// Leases per second to the bucket's tasks together (0: no limit).
    #[arg(long)]
    pub rate_limit: Option<f64>,
    /// Tokens the bucket holds at most (default: one second's worth).
    #[arg(long, requires = "rate_limit")]
    pub burst: Option<u32>,
    /// Leases the bucket's tasks hold at once (0: no limit).
    #[arg(long)]
    pub max_concurrent: Option<u32>,
    /// Print JSON instead of a readable block.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
pub struct CooldownListArgs {
    /// Only the cooldowns of this queue's keys.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only the cooldown of this bucket.
    #[arg(long)]
    pub bucket: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").args(["key", "bucket"]).required(true)))]
pub struct LiftArgs {
    /// The queue of the key.
    #[arg(long, requires = "key")]
    pub queue: Option<String>,
    /// The concurrency key.
    #[arg(long, requires = "queue")]
    pub key: Option<String>,
    /// The bucket.
    #[arg(long)]
    pub bucket: Option<String>,
    #[command(flatten)]
    pub connection: Connection,
}

pub async fn run_bucket(cmd: BucketCommand) -> Result<String, CliError> {
    Ok(match cmd {
        BucketCommand::List(a) => {
            let bs = connect(&a.connection).await?.list_buckets().await?;
            if a.json {
                json_line(&Value::Array(bs.iter().map(bucket_json).collect()))
            } else if bs.is_empty() {
                "no buckets\n".to_string()
            } else {
                bucket_rows(&bs)
            }
        }
        BucketCommand::Get(a) => {
            let b = connect(&a.connection).await?.get_bucket(&a.name).await?;
            show(&b, a.json)
        }
        BucketCommand::Set(a) => {
            let mut u = BucketUpdate::new(&a.name);
            if let Some(r) = a.rate_limit {
                u = u.rate_limit((r > 0.0).then_some(r), a.burst.unwrap_or(0));
            }
            if let Some(n) = a.max_concurrent {
                u = u.max_concurrent(n);
            }
            if u.is_empty() {
                return Err(CliError::Usage(
                    "name at least one setting to change (see --help)".into(),
                ));
            }
            let b = connect(&a.connection).await?.update_bucket(u).await?;
            show(&b, a.json)
        }
        BucketCommand::Delete(a) => {
            connect(&a.connection).await?.delete_bucket(&a.name).await?;
            format!("deleted bucket {}\n", a.name)
        }
    })
}

pub async fn run_cooldown(cmd: CooldownCommand) -> Result<String, CliError> {
    Ok(match cmd {
        CooldownCommand::List(a) => {
            let cs = connect(&a.connection)
                .await?
                .list_cooldowns(a.queue.as_deref(), a.bucket.as_deref())
                .await?;
            if a.json {
                json_line(&Value::Array(cs.iter().map(cooldown_json).collect()))
            } else if cs.is_empty() {
                "no cooldowns\n".to_string()
            } else {
                cooldown_rows(&cs)
            }
        }
        CooldownCommand::Lift(a) => {
            let (of, what) = match (a.queue, a.key, a.bucket) {
                (Some(queue), Some(key), None) => {
                    let what = format!("key {key} of queue {queue}");
                    (CooldownOf::Key { queue, key }, what)
                }
                (None, None, Some(b)) => (CooldownOf::Bucket(b.clone()), format!("bucket {b}")),
                _ => {
                    return Err(CliError::Usage(
                        "name --queue and --key, or --bucket".into(),
                    ));
                }
            };
            if connect(&a.connection).await?.lift_cooldown(of).await? {
                format!("lifted the cooldown of {what}\n")
            } else {
                format!("no cooldown of {what}\n")
            }
        }
    })
}

fn rate(r: &Option<pb::RateLimit>) -> String {
    r.as_ref()
        .map(|r| format!("{}/s (burst {})", r.per_second, r.burst))
        .unwrap_or_else(|| "-".into())
}

fn limit(n: u32) -> String {
    if n == 0 { "-".into() } else { n.to_string() }
}

fn show(b: &pb::LimitBucket, json: bool) -> String {
    if json {
        return json_line(&bucket_json(b));
    }
    let c = b.config.unwrap_or_default();
    let u = b.r#use.unwrap_or_default();
    format!(
        "bucket:          {}\nrate_limit:      {}\nmax_concurrent:  {}\ntokens:          {:.2}\nleases_held:     {}\ncooldown_until:  {}\n",
        b.name,
        rate(&c.rate_limit),
        limit(c.max_concurrent),
        u.tokens,
        u.leases_held,
        time(&b.cooldown_until),
    )
}

fn bucket_rows(bs: &[pb::LimitBucket]) -> String {
    let rows: Vec<Vec<String>> = bs
        .iter()
        .map(|b| {
            let c = b.config.unwrap_or_default();
            let u = b.r#use.unwrap_or_default();
            vec![
                b.name.clone(),
                rate(&c.rate_limit),
                limit(c.max_concurrent),
                format!("{:.2}", u.tokens),
                u.leases_held.to_string(),
                time(&b.cooldown_until),
            ]
        })
        .collect();
    table(
        &["BUCKET", "RATE", "MAX", "TOKENS", "HELD", "COOLDOWN UNTIL"],
        &rows,
    )
}

fn bucket_json(b: &pb::LimitBucket) -> Value {
    let c = b.config.unwrap_or_default();
    let u = b.r#use.unwrap_or_default();
    json!({
        "name": b.name,
        "rate_limit": c.rate_limit.map(|r| json!({"per_second": r.per_second, "burst": r.burst})),
        "max_concurrent": c.max_concurrent,
        "tokens": u.tokens,
        "leases_held": u.leases_held,
        "cooldown_until": time_json(&b.cooldown_until),
    })
}

fn scope(v: i32) -> &'static str {
    match pb::CooldownScope::try_from(v) {
        Ok(pb::CooldownScope::ConcurrencyKey) => "key",
        Ok(pb::CooldownScope::Bucket) => "bucket",
        _ => "?",
    }
}

fn cooldown_rows(cs: &[pb::CooldownHold]) -> String {
    let rows: Vec<Vec<String>> = cs
        .iter()
        .map(|c| {
            let of = if c.bucket.is_empty() {
                format!("{}/{}", c.queue, c.concurrency_key)
            } else {
                c.bucket.clone()
            };
            vec![scope(c.scope).into(), of, time(&c.until), c.task_id.clone()]
        })
        .collect();
    table(&["SCOPE", "OF", "UNTIL", "SET BY TASK"], &rows)
}

fn cooldown_json(c: &pb::CooldownHold) -> Value {
    json!({
        "scope": scope(c.scope),
        "queue": c.queue,
        "concurrency_key": c.concurrency_key,
        "bucket": c.bucket,
        "until": time_json(&c.until),
        "task_id": c.task_id,
    })
}
