//! The soak phase (`--soak DURATION`): the dispatch-latency load (open-loop
//! submits at a fixed rate, default half the measured peak, against waiting
//! long-poll workers) run as back-to-back windows of `--soak-sample-seconds`
//! until DURATION has passed. After each window one sample is written to the CSV:
//! the broker's resident memory (VmRSS), that window's dispatch p50/p99 and
//! throughput, and the database's size: on Postgres the `tasks` and
//! `task_attempts` table and index sizes and dead/live tuples
//! (`pg_stat_user_tables`), on SQLite the database and WAL file sizes.
//! `bench/soak.sh` runs it on a store and plots the CSV (`bench/soak_plot.py`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::args::Params;
use crate::latency;
use crate::report::percentile;
use crate::rpc::Broker;

/// The CSV columns, in order.
const HEADER: &str = "elapsed_s,rss_mb,dispatch_p50_ms,dispatch_p99_ms,throughput_per_s,errors,\
tasks_table_mb,tasks_index_mb,attempts_table_mb,attempts_index_mb,tasks_dead_tuples,\
tasks_live_tuples,attempts_dead_tuples,sqlite_db_mb,sqlite_wal_mb";

/// Where the database's size is read from.
pub enum Database {
    Postgres(sqlx::PgPool),
    Sqlite(PathBuf),
    Unknown,
}

impl Database {
    /// From the database URL of the broker the benchmark started.
    pub async fn open(url: Option<&str>) -> anyhow::Result<Database> {
        Ok(match url {
            Some(u) if u.starts_with("postgres") => Database::Postgres(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(u)
                    .await
                    .context("connecting to the broker's Postgres for its sizes")?,
            ),
            Some(u) if u.starts_with("sqlite://") => {
                let path = u.trim_start_matches("sqlite://");
                Database::Sqlite(PathBuf::from(path.split('?').next().unwrap_or(path)))
            }
            _ => Database::Unknown,
        })
    }

    /// The size columns of one sample (empty where they do not apply).
    async fn sizes(&self) -> anyhow::Result<[String; 9]> {
        let mb = |b: i64| format!("{:.3}", b as f64 / (1024.0 * 1024.0));
        let mut out: [String; 9] = Default::default();
        match self {
            Database::Postgres(pool) => {
                let row: (i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(
                    "SELECT pg_table_size('tasks'), pg_indexes_size('tasks'), \
                       pg_table_size('task_attempts'), pg_indexes_size('task_attempts'), \
                       COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables \
                         WHERE relname = 'tasks'), 0), \
                       COALESCE((SELECT n_live_tup FROM pg_stat_user_tables \
                         WHERE relname = 'tasks'), 0), \
                       COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables \
                         WHERE relname = 'task_attempts'), 0)",
                )
                .fetch_one(pool)
                .await
                .context("reading table sizes")?;
                out[0] = mb(row.0);
                out[1] = mb(row.1);
                out[2] = mb(row.2);
                out[3] = mb(row.3);
                out[4] = row.4.to_string();
                out[5] = row.5.to_string();
                out[6] = row.6.to_string();
            }
            Database::Sqlite(path) => {
                let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len() as i64);
                let mut wal = path.as_os_str().to_owned();
                wal.push("-wal");
                out[7] = mb(len(path));
                out[8] = mb(len(Path::new(&wal)));
            }
            Database::Unknown => {}
        }
        Ok(out)
    }
}

/// The resident memory of a process now (VmRSS), in MiB.
fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub struct Soak {
    pub samples: usize,
    pub csv: PathBuf,
}

#[allow(clippy::too_many_arguments)]
pub async fn run(
    p: &Params,
    rate: f64,
    duration: Duration,
    every: Duration,
    workers: &[Broker],
    producers: &[Broker],
    queue: &str,
    pid: Option<u32>,
    db: &Database,
    csv: &Path,
) -> anyhow::Result<Soak> {
    if let Some(dir) = csv.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut out =
        std::fs::File::create(csv).with_context(|| format!("creating {}", csv.display()))?;
    writeln!(out, "{HEADER}")?;
    let window = Params {
        latency_seconds: every.as_secs_f64(),
        ..p.clone()
    };
    let start = Instant::now();
    let mut samples = 0;
    while start.elapsed() < duration {
        let began = Instant::now();
        let l = latency::run(&window, rate, workers, producers, queue).await?;
        let took = began.elapsed().as_secs_f64();
        let ms = |q| percentile(&l.samples, q).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
        let rss = pid
            .and_then(rss_mb)
            .map_or(String::new(), |v| format!("{v:.1}"));
        let sizes = db.sizes().await?;
        let line = format!(
            "{:.1},{rss},{:.3},{:.3},{:.1},{},{}",
            start.elapsed().as_secs_f64(),
            ms(0.5),
            ms(0.99),
            l.tasks as f64 / took,
            l.errors,
            sizes.join(",")
        );
        writeln!(out, "{line}")?;
        out.flush()?;
        eprintln!("soak: {line}");
        samples += 1;
    }
    Ok(Soak {
        samples,
        csv: csv.to_path_buf(),
    })
}
