//! The command line, and the parameters it resolves to (mode-dependent defaults
//! filled in, limits checked) before any connection is made.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// The broker's limit on tasks per Submit call.
const MAX_SUBMIT_BATCH: usize = 1000;
/// The broker's limit on tasks per Lease call.
const MAX_LEASE_BATCH: u32 = 256;
/// Replicas one benchmark starts: each is a process on this one machine.
const MAX_REPLICAS: usize = 8;

/// How the simulated clients talk to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// What a naive client does: one task per Submit, each worker leases 1 task,
    /// completes it (one Complete RPC), then leases the next.
    PerTask,
    /// The client runtime's best practice: Submit in batches, lease up to
    /// `--lease-batch` tasks per long-poll for free slots only, complete them concurrently.
    Batched,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::PerTask => "per-task",
            Mode::Batched => "batched",
        }
    }
}

/// Drives a running taskbroker with P producers and W workers and reports
/// lifecycles/s, submit/s, dispatch latency and the broker's peak RSS.
#[derive(Debug, Parser)]
#[command(name = "taskbroker-bench", version)]
pub struct Args {
    /// The broker's gRPC address (loopback). Ignored with --spawn-broker.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// Tasks pushed through submit -> lease -> complete in the throughput phase.
    #[arg(long, default_value_t = 20_000)]
    pub tasks: u64,
    /// Concurrent producers, each on its own connection, each with one Submit in
    /// flight. Default: one per worker in per-task mode (a fleet of naive
    /// clients), 2 in batched mode.
    #[arg(long)]
    pub producers: Option<usize>,
    /// Concurrent workers, each on its own HTTP/2 connection.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Tasks per Submit call, 1-1000. Default: 1 in per-task mode, 500 in batched mode.
    #[arg(long)]
    pub submit_batch: Option<usize>,
    /// Batched mode: most tasks one worker holds, and asks for in one Lease, 1-256.
    #[arg(long, default_value_t = 64)]
    pub lease_batch: u32,
    /// Payload size of every task, in bytes.
    #[arg(long, default_value_t = 64)]
    pub payload_bytes: usize,
    #[arg(long, value_enum, default_value_t = Mode::Batched)]
    pub mode: Mode,
    /// Offered loads of the dispatch-latency phase, tasks/s, comma-separated: one
    /// open-loop run per rate (e.g. `500,1000,3000`). Default: half of the
    /// lifecycles/s measured in the throughput phase. A soak uses the first.
    #[arg(long, value_delimiter = ',')]
    pub latency_rate: Vec<f64>,
    /// Length of the dispatch-latency phase in seconds; 0 skips it.
    #[arg(long, default_value_t = 5.0)]
    pub latency_seconds: f64,
    /// Tasks pre-loaded into another queue (batches of 1000) before measuring.
    #[arg(long, default_value_t = 0)]
    pub backlog: u64,
    /// Tasks pre-loaded into each measured queue, due in a day at priority 10
    /// (above every measured task): what a backlog of scheduled work costs the
    /// leases of the tasks that are due.
    #[arg(long, default_value_t = 0)]
    pub future_backlog: u64,
    /// Read the broker's peak RSS (VmHWM) from /proc/PID/status at the end.
    #[arg(long, conflicts_with = "spawn_broker")]
    pub broker_pid: Option<u32>,
    /// The database server's process (Postgres' postmaster, mysqld), to count the
    /// CPU it spends in the throughput phase alone: the process, its live
    /// children and the children it reaped (a Postgres backend per connection).
    #[arg(long)]
    pub db_pid: Option<u32>,
    /// Start `--broker-bin serve` on this database URL on a free loopback port,
    /// benchmark it, and stop it at the end.
    #[arg(long, value_name = "DATABASE_URL")]
    pub spawn_broker: Option<String>,
    /// The broker binary used by --spawn-broker.
    #[arg(long, default_value = "target/release/taskbroker")]
    pub broker_bin: PathBuf,
    /// Gives up (and exits non-zero) when one phase takes longer than this, in seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_seconds: f64,
    /// Free-form label copied into the JSON line (compare.sh names its runs with it).
    #[arg(long)]
    pub label: Option<String>,
    /// Soak for this long (e.g. `30m`) instead of the latency phase: the latency
    /// load at `--latency-rate` (default half the measured peak) in back-to-back
    /// windows, one CSV sample per window (see `soak.rs`, `bench/soak.sh`).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub soak: Option<Duration>,
    /// Soak: seconds per window (one sample each).
    #[arg(long, default_value_t = 10.0)]
    pub soak_sample_seconds: f64,
    /// Soak: where the samples go.
    #[arg(long, default_value = "bench/results/soak.csv")]
    pub soak_csv: PathBuf,

    // Pick-up latency (peers measured the same way, replicas).
    /// Before the open loops, measure pick-up latency in a closed loop for
    /// `--latency-seconds`: one task per Submit, the next sent once a worker's
    /// Lease reply carried the previous one.
    #[arg(long)]
    pub closed_loop: bool,
    /// With --spawn-broker: start this many broker replicas on the one database
    /// (the first runs the migrations before the others start) and spread the
    /// producers' and workers' connections across them, round robin. Each replica
    /// opens its own pool (`db_max_connections`, 16 by default): mind the
    /// database's `max_connections` (100 by default).
    #[arg(long, default_value_t = 1, requires = "spawn_broker")]
    pub replicas: usize,
    /// Routing: every task is targeted by labels (`gpu=a100,
    /// region=eu`) and every worker carries them (and one more), so each lease
    /// checks the target of every task it takes.
    #[arg(long)]
    pub targeted: bool,
    /// Every task carries an idempotency key of its own (as producers that
    /// retry safely submit).
    #[arg(long)]
    pub keyed: bool,

    /// Admission: every task gets one of this many concurrency keys, in
    /// turn; 0 = none.
    #[arg(long, default_value_t = 0)]
    pub concurrency_keys: u64,
    /// With --concurrency-keys: the measured queues' max_concurrent_per_key.
    #[arg(long, default_value_t = 5)]
    pub max_per_key: u32,
    /// The measured queues' rate limit, leases/s; 0 = none.
    #[arg(long, default_value_t = 0.0)]
    pub rate_limit: f64,

    /// lease_next: per-task workers' Complete calls no longer ask for
    /// the next task (lease 1, complete 1: three RPCs per lifecycle with the
    /// Submit), for A/B against the default.
    #[arg(long)]
    pub no_lease_next: bool,
    /// lease_next in batched mode too: each CompleteMany asks for as many tasks as
    /// it frees slots. Off by default: it measured slower (docs/performance.md,
    /// "lease_next and per-task CPU"). `--no-lease-next` wins.
    #[arg(long)]
    pub batched_lease_next: bool,
}

/// Every parameter of a run, defaults resolved.
#[derive(Debug, Clone)]
pub struct Params {
    pub mode: Mode,
    pub tasks: u64,
    pub producers: usize,
    pub workers: usize,
    pub submit_batch: usize,
    pub lease_batch: u32,
    pub payload_bytes: usize,
    pub latency_rates: Vec<f64>,
    pub latency_seconds: f64,
    pub backlog: u64,
    pub future_backlog: u64,
    pub timeout: Duration,
    pub closed_loop: bool,
    pub replicas: usize,
    /// Settles carry lease_next (off with `--no-lease-next`).
    pub lease_next: bool,
}

impl Args {
    /// Whether this run's settles carry lease_next.
    pub fn lease_next(&self) -> bool {
        !self.no_lease_next && (self.mode == Mode::PerTask || self.batched_lease_next)
    }

    /// Fills in the mode-dependent defaults and checks the broker's limits.
    pub fn params(&self) -> Result<Params, String> {
        let per_task = self.mode == Mode::PerTask;
        let producers = self
            .producers
            .unwrap_or(if per_task { self.workers } else { 2 });
        let submit_batch = self.submit_batch.unwrap_or(if per_task { 1 } else { 500 });
        let lease_batch = if per_task { 1 } else { self.lease_batch };
        if self.tasks == 0 {
            return Err("--tasks must be at least 1".into());
        }
        if self.workers == 0 || producers == 0 {
            return Err("--workers and --producers must be at least 1".into());
        }
        if !(1..=MAX_SUBMIT_BATCH).contains(&submit_batch) {
            return Err(format!("--submit-batch must be 1-{MAX_SUBMIT_BATCH}"));
        }
        if !(1..=MAX_LEASE_BATCH).contains(&lease_batch) {
            return Err(format!("--lease-batch must be 1-{MAX_LEASE_BATCH}"));
        }
        if !(self.latency_seconds >= 0.0 && self.latency_seconds.is_finite()) {
            return Err("--latency-seconds must be 0 or more".into());
        }
        if self
            .latency_rate
            .iter()
            .any(|r| !(*r > 0.0 && r.is_finite()))
        {
            return Err("--latency-rate must be above 0".into());
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(format!("--replicas must be 1-{MAX_REPLICAS}"));
        }
        if self.replicas > 1 && !matches!(self.store(), Some("postgres" | "mysql")) {
            return Err("--replicas above 1 needs a Postgres or MySQL --spawn-broker URL".into());
        }
        if !(self.soak_sample_seconds >= 1.0 && self.soak_sample_seconds.is_finite()) {
            return Err("--soak-sample-seconds must be 1 or more".into());
        }
        if !(self.timeout_seconds > 0.0 && self.timeout_seconds.is_finite()) {
            return Err("--timeout-seconds must be above 0".into());
        }
        Ok(Params {
            mode: self.mode,
            tasks: self.tasks,
            producers,
            workers: self.workers,
            submit_batch,
            lease_batch,
            payload_bytes: self.payload_bytes,
            latency_rates: self.latency_rate.clone(),
            latency_seconds: self.latency_seconds,
            backlog: self.backlog,
            future_backlog: self.future_backlog,
            timeout: Duration::from_secs_f64(self.timeout_seconds),
            closed_loop: self.closed_loop,
            replicas: self.replicas,
            lease_next: self.lease_next(),
        })
    }

    /// `sqlite`, `postgres` or `mysql` when the benchmark starts the broker itself.
    pub fn store(&self) -> Option<&'static str> {
        let url = self.spawn_broker.as_deref()?;
        if url.starts_with("sqlite:") {
            Some("sqlite")
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Some("postgres")
        } else if url.starts_with("mysql:") {
            Some("mysql")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("taskbroker-bench").chain(args.iter().copied()))
            .expect("valid arguments")
    }

    #[test]
    fn per_task_mode_defaults_to_one_task_per_call_and_a_producer_per_worker() {
        let p = parse(&["--mode", "per-task", "--workers", "64"])
            .params()
            .unwrap();
        assert_eq!((p.producers, p.submit_batch, p.lease_batch), (64, 1, 1));
    }

    #[test]
    fn batched_mode_defaults_to_big_submits_and_lease_batches() {
        let p = parse(&["--workers", "8"]).params().unwrap();
        assert_eq!((p.producers, p.submit_batch, p.lease_batch), (2, 500, 64));
    }

    #[test]
    fn limits_of_the_broker_are_checked_before_connecting() {
        assert!(parse(&["--submit-batch", "1001"]).params().is_err());
        assert!(parse(&["--lease-batch", "257"]).params().is_err());
        assert!(parse(&["--tasks", "0"]).params().is_err());
        assert!(parse(&["--soak-sample-seconds", "0"]).params().is_err());
    }

    #[test]
    fn a_soak_takes_a_human_duration() {
        assert_eq!(
            parse(&["--soak", "30m"]).soak,
            Some(Duration::from_secs(1800))
        );
        assert!(Args::try_parse_from(["taskbroker-bench", "--soak", "soon"]).is_err());
    }

    #[test]
    fn latency_rates_are_a_comma_separated_list() {
        let p = parse(&["--latency-rate", "500,1000,3000", "--closed-loop"])
            .params()
            .unwrap();
        assert_eq!(p.latency_rates, vec![500.0, 1000.0, 3000.0]);
        assert!(p.closed_loop);
        assert!(parse(&["--latency-rate", "500,0"]).params().is_err());
        assert!(parse(&[]).params().unwrap().latency_rates.is_empty());
    }

    #[test]
    fn replicas_need_a_spawned_broker_and_a_sane_count() {
        let url = ["--spawn-broker", "postgres://u@h/db"];
        let p = parse(&[url[0], url[1], "--replicas", "3"])
            .params()
            .unwrap();
        assert_eq!(p.replicas, 3);
        assert!(
            parse(&[url[0], url[1], "--replicas", "0"])
                .params()
                .is_err()
        );
        let sqlite = ["--spawn-broker", "sqlite:///tmp/x.db", "--replicas", "2"];
        assert!(parse(&sqlite).params().is_err());
        assert!(Args::try_parse_from(["taskbroker-bench", "--replicas", "2"]).is_err());
    }

    #[test]
    fn the_store_is_named_from_the_spawned_broker_url() {
        assert_eq!(
            parse(&["--spawn-broker", "sqlite:///tmp/x.db"]).store(),
            Some("sqlite")
        );
        assert_eq!(
            parse(&["--spawn-broker", "postgres://u@h/db"]).store(),
            Some("postgres")
        );
        assert_eq!(
            parse(&["--spawn-broker", "mysql://u:p@h:3306/db"]).store(),
            Some("mysql")
        );
        assert_eq!(parse(&[]).store(), None);
    }
}
