//! `taskbroker import`: drains a legacy task table (Postgres or MySQL/MariaDB) into
//! tasks (docs/migrating.md). Rows are read in batches ordered by an integer id
//! (`WHERE id > last ORDER BY id LIMIT batch`, so memory stays bounded), each row is
//! mapped by `--map FIELD=EXPR` to a task whose key is derived from the id (or
//! mapped), and each batch goes to the broker in one Submit. The key makes a re-run
//! submit nothing twice: a row whose task exists comes back deduplicated.

use std::str::FromStr;
use std::time::{Duration, UNIX_EPOCH};

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{MySqlPool, PgPool, Row};

use super::{CliError, Connection, connect};
use crate::TaskSpec;

/// The most rows one batch may hold: one Submit takes at most 1000 tasks.
pub const MAX_BATCH: u32 = 1000;

/// How many mapped tasks a dry run prints.
const DRY_RUN_SAMPLE: usize = 5;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").args(["table", "query"]).required(true)))]
pub struct ImportArgs {
    /// The legacy database: postgres://USER:PASS@HOST/DB or mysql://USER:PASS@HOST/DB
    /// (MySQL 8.0, MariaDB 10.6+; `mariadb://` is read too).
    #[arg(long, env = "TASKBROKER_IMPORT_FROM", hide_env_values = true)]
    pub from: String,
    /// The table to read, e.g. `jobs`.
    #[arg(long)]
    pub table: Option<String>,
    /// A SELECT whose result is read instead of a table; --map and --id name its columns.
    #[arg(long)]
    pub query: Option<String>,
    /// FIELD=EXPR, repeatable. FIELD is queue, key, payload, priority, run_at,
    /// attempts or checkpoint (the first attempt's checkpoint; NULL: none); EXPR is a column or an SQL expression over the row (e.g.
    /// `attempts=max_retries - retry_count + 1`), or a literal in single quotes
    /// (`queue='emails'`). queue and payload are required.
    #[arg(long = "map", value_parser = parse_map)]
    pub map: Vec<(Field, String)>,
    /// The integer column that orders the rows and names each one (its key is
    /// `PREFIX:ID` unless key is mapped).
    #[arg(long, default_value = "id")]
    pub id: String,
    /// Only rows for which this SQL condition holds, e.g. `status = 'pending'`.
    #[arg(long = "where")]
    pub filter: Option<String>,
    /// The task key's prefix when key is not mapped [default: the table's name, or
    /// `import` with --query].
    #[arg(long)]
    pub key_prefix: Option<String>,
    /// Rows per read and per Submit, 1 to 1000.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=MAX_BATCH as i64))]
    pub batch: u32,
    /// At most this many rows per second (e.g. 200); unlimited unless given.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// MySQL: the session time zone `run_at` datetimes are read in (the one the old
    /// code's sessions wrote them in), e.g. `+02:00` or `SYSTEM` [default: +00:00].
    #[arg(long)]
    pub time_zone: Option<String>,
    /// Map and count the rows and print the first few tasks; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop at the first row that cannot be mapped (by default it is reported and skipped).
    #[arg(long)]
    pub stop_on_bad_row: bool,
    #[command(flatten)]
    pub connection: Connection,
}

/// A task field `--map` can fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Queue,
    Key,
    Payload,
    Priority,
    RunAt,
    Attempts,
    Checkpoint,
}

const FIELDS: [Field; 7] = [
    Field::Queue,
    Field::Key,
    Field::Payload,
    Field::Priority,
    Field::RunAt,
    Field::Attempts,
    Field::Checkpoint,
];

fn parse_map(s: &str) -> Result<(Field, String), String> {
    let (f, expr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not FIELD=EXPR"))?;
    let field = match f.trim() {
        "queue" => Field::Queue,
        "key" => Field::Key,
        "payload" => Field::Payload,
        "priority" => Field::Priority,
        "run_at" | "run-at" => Field::RunAt,
        "attempts" | "max_attempts" => Field::Attempts,
        "checkpoint" => Field::Checkpoint,
        other => {
            return Err(format!(
                "unknown field {other:?} (queue, key, payload, priority, run_at, attempts, \
                 checkpoint)"
            ));
        }
    };
    let expr = expr.trim();
    if expr.is_empty() {
        return Err(format!("{f}: no column or expression"));
    }
    Ok((field, expr.to_string()))
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let n: f64 = s
        .trim_end_matches("/s")
        .parse()
        .map_err(|_| format!("{s:?} is not a number of rows per second"))?;
    if !(n.is_finite() && n > 0.0) {
        return Err(format!("{s:?}: must be more than 0"));
    }
    Ok(n)
}

/// What one row reads as, before mapping: every mapped field as text, except the
/// payload and checkpoint (bytes) and run_at (Unix seconds, read by the database).
#[derive(Debug, Default)]
struct Raw {
    id: i64,
    queue: Option<String>,
    key: Option<String>,
    payload: Option<Vec<u8>>,
    priority: Option<String>,
    run_at: Option<i64>,
    attempts: Option<String>,
    checkpoint: Option<Vec<u8>>,
}

/// The mapping the flags describe, checked once.
struct Mapping {
    exprs: Vec<(Field, String)>,
    id: String,
    prefix: String,
}

impl Mapping {
    fn new(a: &ImportArgs) -> Result<Mapping, CliError> {
        let mut exprs: Vec<(Field, String)> = Vec::new();
        for (f, e) in &a.map {
            // A later --map of the same field wins.
            exprs.retain(|(g, _)| g != f);
            exprs.push((*f, e.clone()));
        }
        for need in [Field::Queue, Field::Payload] {
            if !exprs.iter().any(|(f, _)| *f == need) {
                return Err(CliError::Usage(format!(
                    "--map {}=COLUMN is required",
                    field_name(need)
                )));
            }
        }
        let prefix = a
            .key_prefix
            .clone()
            .or_else(|| a.table.clone())
            .unwrap_or_else(|| "import".into());
        Ok(Mapping {
            exprs,
            id: a.id.clone(),
            prefix,
        })
    }

    fn expr(&self, f: Field) -> Option<&str> {
        self.exprs
            .iter()
            .find(|(g, _)| *g == f)
            .map(|(_, e)| e.as_str())
    }

    /// The literal a field is mapped to (`'emails'`), if it is one.
    fn literal(&self, f: Field) -> Option<String> {
        let e = self.expr(f)?;
        let inner = e.strip_prefix('\'')?.strip_suffix('\'')?;
        Some(inner.replace("''", "'"))
    }

    /// One row to a task, or why it cannot be one.
    fn task(&self, raw: Raw) -> Result<TaskSpec, String> {
        let queue = match self.literal(Field::Queue) {
            Some(q) => q,
            None => raw.queue.ok_or("queue is NULL")?,
        };
        if !valid_queue(&queue) {
            return Err(format!(
                "queue {queue:?} is not a queue name ([A-Za-z0-9._:-]{{1,128}})"
            ));
        }
        let payload = match self.literal(Field::Payload) {
            Some(p) => p.into_bytes(),
            None => raw.payload.ok_or("payload is NULL")?,
        };
        let key = match (self.literal(Field::Key), self.expr(Field::Key)) {
            (Some(k), _) => format!("{k}:{}", raw.id),
            (None, Some(_)) => raw.key.ok_or("key is NULL")?,
            (None, None) => format!("{}:{}", self.prefix, raw.id),
        };
        let mut spec = TaskSpec::new(queue, payload).key(key);
        if let Some(p) = self.number(Field::Priority, raw.priority)? {
            let p = i32::try_from(p).map_err(|_| format!("priority {p} is out of range"))?;
            spec = spec.priority(p);
        }
        if let Some(at) = raw.run_at {
            let secs = u64::try_from(at).unwrap_or(0);
            spec = spec.run_at(UNIX_EPOCH + Duration::from_secs(secs));
        } else if self.expr(Field::RunAt).is_some() {
            return Err("run_at is NULL".into());
        }
        if let Some(n) = self.number(Field::Attempts, raw.attempts)? {
            // A row with no attempts left still runs once, as it would have.
            let n = u32::try_from(n.max(1)).map_err(|_| format!("attempts {n} is out of range"))?;
            spec = spec.max_attempts(n);
        }
        // A NULL checkpoint is none: the task starts from scratch.
        let checkpoint = match self.literal(Field::Checkpoint) {
            Some(c) => Some(c.into_bytes()),
            None => raw.checkpoint,
        };
        if let Some(c) = checkpoint {
            spec = spec.checkpoint(c);
        }
        Ok(spec)
    }

    fn number(&self, f: Field, read: Option<String>) -> Result<Option<i64>, String> {
        let Some(expr) = self.expr(f) else {
            return Ok(None);
        };
        let text = match self.literal(f) {
            Some(l) => l,
            None => read.ok_or_else(|| format!("{} is NULL", field_name(f)))?,
        };
        let text = text.trim();
        text.parse::<i64>()
            .or_else(|_| text.parse::<f64>().map(|x| x as i64))
            .map(Some)
            .map_err(|_| format!("{} ({expr}) {text:?} is not a number", field_name(f)))
    }
}

fn field_name(f: Field) -> &'static str {
    match f {
        Field::Queue => "queue",
        Field::Key => "key",
        Field::Payload => "payload",
        Field::Priority => "priority",
        Field::RunAt => "run_at",
        Field::Attempts => "attempts",
        Field::Checkpoint => "checkpoint",
    }
}

/// A Postgres expression as bytes: a bytea column as it is, anything else as its
/// text in UTF-8.
fn bytes_pg(e: &str) -> String {
    format!(
        "CASE WHEN pg_typeof(({e})) = 'bytea'::regtype THEN CAST(CAST(({e}) AS TEXT) AS BYTEA) \
         ELSE convert_to(CAST(({e}) AS TEXT), 'UTF8') END"
    )
}

fn valid_queue(q: &str) -> bool {
    (1..=128).contains(&q.len())
        && q.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

enum Source {
    Postgres(PgPool),
    MySql(MySqlPool),
}

impl Source {
    fn open(a: &ImportArgs) -> Result<Source, CliError> {
        let url = &a.from;
        match url.split_once("://").map(|(s, _)| s).unwrap_or("") {
            "postgres" | "postgresql" => {
                let options = PgConnectOptions::from_str(url)
                    .map_err(|e| CliError::Usage(format!("--from is not a Postgres URL: {e}")))?
                    .application_name("taskbroker import");
                Ok(Source::Postgres(
                    PgPoolOptions::new()
                        .max_connections(1)
                        .acquire_timeout(Duration::from_secs(10))
                        .connect_lazy_with(options),
                ))
            }
            "mysql" | "mariadb" => {
                let url = url.replacen("mariadb://", "mysql://", 1);
                let mut options = MySqlConnectOptions::from_str(&url)
                    .map_err(|e| CliError::Usage(format!("--from is not a MySQL URL: {e}")))?;
                if let Some(tz) = &a.time_zone {
                    options = options.timezone(Some(tz.clone()));
                }
                Ok(Source::MySql(
                    MySqlPoolOptions::new()
                        .max_connections(1)
                        .acquire_timeout(Duration::from_secs(10))
                        .connect_lazy_with(options),
                ))
            }
            _ => Err(CliError::Usage(
                "--from must be a postgres:// or mysql:// URL".into(),
            )),
        }
    }

    /// The keyset query: the id, then each field (NULL where not read), after `after`.
    fn select(&self, m: &Mapping, a: &ImportArgs) -> String {
        let pg = matches!(self, Source::Postgres(_));
        let text = |e: &str| {
            if pg {
                format!("CAST(({e}) AS TEXT)")
            } else {
                format!("CAST(({e}) AS CHAR)")
            }
        };
        let column = |f: Field| -> String {
            let Some(e) = m.expr(f).filter(|_| m.literal(f).is_none()) else {
                return "NULL".into();
            };
            match (f, pg) {
                (Field::Payload, true) => format!("convert_to(CAST(({e}) AS TEXT), 'UTF8')"),
                (Field::Payload, false) => format!("CAST(({e}) AS BINARY)"),
                (Field::Checkpoint, true) => bytes_pg(e),
                (Field::Checkpoint, false) => format!("CAST(({e}) AS BINARY)"),
                (Field::RunAt, true) => format!("CAST(EXTRACT(EPOCH FROM ({e})) AS BIGINT)"),
                (Field::RunAt, false) => format!("CAST(UNIX_TIMESTAMP({e}) AS SIGNED)"),
                _ => text(e),
            }
        };
        let id = &m.id;
        let cols: Vec<String> = FIELDS.iter().map(|f| column(*f)).collect();
        let from = match (&a.table, &a.query) {
            (Some(t), _) => t.clone(),
            (None, Some(q)) => format!("({q}) AS tb_import_src"),
            (None, None) => unreachable!("clap requires --table or --query"),
        };
        let filter = a
            .filter
            .as_ref()
            .map(|w| format!("({w}) AND "))
            .unwrap_or_default();
        let (int, param) = if pg {
            ("BIGINT", "$1")
        } else {
            ("SIGNED", "?")
        };
        format!(
            "SELECT CAST({id} AS {int}), {} FROM {from} WHERE {filter}{id} > {param} \
             ORDER BY {id} LIMIT {}",
            cols.join(", "),
            a.batch
        )
    }

    async fn batch(&self, sql: &str, after: i64) -> Result<Vec<Raw>, sqlx::Error> {
        fn raw<R: Row>(r: &R) -> Result<Raw, sqlx::Error>
        where
            for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
            for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
            for<'a> Vec<u8>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
            usize: sqlx::ColumnIndex<R>,
        {
            Ok(Raw {
                id: r.try_get(0)?,
                queue: r.try_get(1)?,
                key: r.try_get(2)?,
                payload: r.try_get(3)?,
                priority: r.try_get(4)?,
                run_at: r.try_get(5)?,
                attempts: r.try_get(6)?,
                checkpoint: r.try_get(7)?,
            })
        }
        match self {
            Source::Postgres(p) => sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
                .bind(after)
                .fetch_all(p)
                .await?
                .iter()
                .map(raw)
                .collect(),
            Source::MySql(p) => sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
                .bind(after)
                .fetch_all(p)
                .await?
                .iter()
                .map(raw)
                .collect(),
        }
    }

    async fn close(self) {
        match self {
            Source::Postgres(p) => p.close().await,
            Source::MySql(p) => p.close().await,
        }
    }
}

/// What a run did, for the progress lines and the summary.
#[derive(Debug, Default)]
struct Counts {
    read: u64,
    submitted: u64,
    deduplicated: u64,
    bad: u64,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "read {}, submitted {} new, {} already there, {} bad rows skipped",
            self.read, self.submitted, self.deduplicated, self.bad
        )
    }
}

pub async fn run(a: ImportArgs) -> Result<String, CliError> {
    let mapping = Mapping::new(&a)?;
    let source = Source::open(&a)?;
    let result = drain(&a, &mapping, &source).await;
    source.close().await;
    result
}

async fn drain(a: &ImportArgs, m: &Mapping, source: &Source) -> Result<String, CliError> {
    let sql = source.select(m, a);
    let client = if a.dry_run {
        None
    } else {
        Some(connect(&a.connection).await?)
    };
    let started = tokio::time::Instant::now();
    let mut counts = Counts::default();
    let mut sample = String::new();
    let mut after = i64::MIN;
    loop {
        let rows = source.batch(&sql, after).await.map_err(|e| {
            CliError::Usage(format!(
                "reading the rows failed (are --id {:?} and the --map columns in the \
                 table or query?): {e}",
                m.id
            ))
        })?;
        let Some(last) = rows.last() else { break };
        after = last.id;
        let n = rows.len();
        counts.read += n as u64;
        let mut specs = Vec::with_capacity(n);
        for raw in rows {
            let id = raw.id;
            match m.task(raw) {
                Ok(spec) => specs.push(spec),
                Err(why) if a.stop_on_bad_row => {
                    return Err(CliError::Usage(format!(
                        "row {} = {id}: {why} (stopped: --stop-on-bad-row); {counts}",
                        m.id
                    )));
                }
                Err(why) => {
                    eprintln!("import: row {} = {id} skipped: {why}", m.id);
                    counts.bad += 1;
                }
            }
        }
        match &client {
            None => {
                for spec in specs
                    .iter()
                    .take(DRY_RUN_SAMPLE.saturating_sub(sample_len(&sample)))
                {
                    sample.push_str(&describe(spec));
                }
                counts.submitted += specs.len() as u64;
            }
            Some(c) if !specs.is_empty() => {
                for r in c.submit_many(specs).await? {
                    if r.deduplicated {
                        counts.deduplicated += 1;
                    } else {
                        counts.submitted += 1;
                    }
                }
            }
            Some(_) => {}
        }
        eprintln!("import: {counts}");
        if let Some(rate) = a.rate {
            let due = started + Duration::from_secs_f64(counts.read as f64 / rate);
            tokio::time::sleep_until(due).await;
        }
        if n < a.batch as usize {
            break;
        }
    }
    if a.dry_run {
        Ok(format!(
            "dry run: would submit {} tasks ({} rows read, {} bad rows), nothing submitted\n{sample}",
            counts.submitted, counts.read, counts.bad
        ))
    } else {
        Ok(format!("imported: {counts}\n"))
    }
}

fn sample_len(sample: &str) -> usize {
    sample.lines().count()
}

/// One line of a dry run: what the task would be.
fn describe(spec: &TaskSpec) -> String {
    let t: crate::pb::TaskSpec = spec.clone().into();
    let run_at = t
        .run_at
        .map(|ts| ts.seconds.to_string())
        .unwrap_or_else(|| "now".into());
    let attempts = t
        .retry
        .map(|r| r.max_attempts.to_string())
        .unwrap_or_else(|| "default".into());
    let checkpoint = t
        .checkpoint
        .map(|c| format!(" checkpoint={} bytes", c.len()))
        .unwrap_or_default();
    format!(
        "  queue={} key={} priority={} run_at={run_at} attempts={attempts}{checkpoint} payload={}\n",
        t.queue,
        t.key,
        t.priority,
        String::from_utf8_lossy(&t.payload)
    )
}
