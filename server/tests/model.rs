//! A model-based property test of the task state machine: random interleavings of
//! submit, lease (one request or several served together), heartbeat, checkpoint,
//! complete (one or many in a call), fail, lease expiry (the reaper at an injected
//! clock), cancel and requeue are run against a real store and, step by step,
//! against a small in-memory model of the rules (states, attempts, lease tokens
//! and fencing, checkpoints, retry budget). Every answer and, after every step,
//! every task as stored must match the model.
//!
//! Each case gets a fresh store: a new SQLite file, or a new schema in a Postgres
//! database made for the run. Cases per store: `TASKBROKER_MODEL_CASES` (default
//! 64, as CI runs it; `scripts/model.sh` runs 10,000).

mod common;

use std::collections::{BTreeMap, HashSet};

use std::sync::Arc;

use std::time::Duration;

use chrono::{DateTime, Utc};

use common::*;

use proptest::prelude::*;

use proptest::sample::Index;

use proptest::test_runner::{Config, TestCaseError, TestRunner};

use taskbroker_server::domain::{RetryPolicy, StoredState, TaskState};

use taskbroker_server::store::{
    self, Changed, CheckpointParams, CompleteParams, FailParams, LeaseParams, LeaseRef, LeaseState,
    NewTask, Settled, Store, TaskFilter,
};

const QUEUES: [&str; 2] = ["qa", "qb"];

const BOGUS_TOKEN: &str = "not-a-token";

/// Tasks in one case, at most (submits beyond it are skipped), so a case stays small.
const MAX_TASKS: usize = 24;

// ---------------------------------------------------------------- operations

/// Which lease token a report carries.
#[derive(Debug, Clone, Copy)]
enum Tok {
    /// The task's newest token (a live lease, or one that ended).
    Current,
    /// The token of the attempt before (a stale holder: the task was leased again).
    Previous,
    /// A token never issued.
    Bogus,
}

#[derive(Debug, Clone)]
enum Op {
    Submit {
        queue: usize,
        priority: i32,
        max_attempts: u32,
        key: Option<u8>,
        backoff_s: u64,
        delay_ms: u64,
    },
    Lease {
        queues: usize,
        max: u32,
        lease_ms: u64,
    },
    /// Several waiting requests for the same queues served by one call.
    LeaseMany {
        queues: usize,
        wanted: Vec<u32>,
        lease_ms: u64,
    },
    Heartbeat {
        task: Index,
        tok: Tok,
        extend_ms: Option<u64>,
    },
    Checkpoint {
        task: Index,
        tok: Tok,
        data: u8,
        extend_ms: Option<u64>,
    },
    Complete {
        task: Index,
        tok: Tok,
    },
    /// One call settling several leases (different tasks, or the same task twice).
    CompleteMany {
        items: Vec<(Index, Tok)>,
        /// Keep only the first item of each task.
        distinct: bool,
    },
    Fail {
        task: Index,
        tok: Tok,
        non_retryable: bool,
        retry_after_ms: Option<u64>,
    },
    Advance {
        ms: u64,
    },
    Reap,
    Cancel {
        task: Index,
    },
    Requeue {
        task: Index,
    },
    /// A report for a task id that does not exist.
    UnknownTask,
}

fn tok() -> impl Strategy<Value = Tok> {
    prop_oneof![6 => Just(Tok::Current), 3 => Just(Tok::Previous), 1 => Just(Tok::Bogus)]
}

/// Which queues a lease names: 0 = qa, 1 = qb, 2 = both.
fn queue_set(i: usize) -> Vec<String> {
    match i {
        0 => vec![QUEUES[0].into()],
        1 => vec![QUEUES[1].into()],
        _ => QUEUES.iter().map(|q| q.to_string()).collect(),
    }
}

fn op(dup_batches: bool) -> impl Strategy<Value = Op> {
    let submit = (
        0..2usize,
        -1..=1i32,
        1..=3u32,
        prop::option::weighted(0.3, 0..4u8),
        0..=2u64,
        prop_oneof![3 => Just(0u64), 1 => 1..3000u64],
    )
        .prop_map(
            |(queue, priority, max_attempts, key, backoff_s, delay_ms)| Op::Submit {
                queue,
                priority,
                max_attempts,
                key,
                backoff_s,
                delay_ms,
            },
        );
    let lease_ms = || prop_oneof![Just(1000u64), Just(5000u64), 1000..20_000u64];
    let extend = || prop::option::of(prop_oneof![Just(1000u64), 1000..20_000u64]);
    let complete_many =
        prop::collection::vec((any::<Index>(), tok()), 1..4).prop_map(move |items| {
            Op::CompleteMany {
                items,
                distinct: !dup_batches,
            }
        });
    prop_oneof![
        6 => submit,
        5 => (0..3usize, 1..=3u32, lease_ms()).prop_map(|(queues, max, lease_ms)| Op::Lease {
            queues,
            max,
            lease_ms
        }),
        2 => (0..3usize, prop::collection::vec(1..=3u32, 2..4), lease_ms())
            .prop_map(|(queues, wanted, lease_ms)| Op::LeaseMany { queues, wanted, lease_ms }),
        3 => (any::<Index>(), tok(), extend())
            .prop_map(|(task, tok, extend_ms)| Op::Heartbeat { task, tok, extend_ms }),
        3 => (any::<Index>(), tok(), any::<u8>(), extend()).prop_map(
            |(task, tok, data, extend_ms)| Op::Checkpoint { task, tok, data, extend_ms }
        ),
        4 => (any::<Index>(), tok()).prop_map(|(task, tok)| Op::Complete { task, tok }),
        2 => complete_many,
        4 => (
            any::<Index>(),
            tok(),
            prop::bool::weighted(0.2),
            prop::option::weighted(0.3, 0..3000u64)
        )
            .prop_map(|(task, tok, non_retryable, retry_after_ms)| Op::Fail {
                task,
                tok,
                non_retryable,
                retry_after_ms
            }),
        4 => prop_oneof![4 => 0..3000u64, 1 => 3000..30_000u64].prop_map(|ms| Op::Advance { ms }),
        3 => Just(Op::Reap),
        2 => any::<Index>().prop_map(|task| Op::Cancel { task }),
        2 => any::<Index>().prop_map(|task| Op::Requeue { task }),
        1 => Just(Op::UnknownTask),
    ]
}

// ---------------------------------------------------------------- the model

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Running,
    Succeeded,
    Failed,
    LeaseExpired,
}

#[derive(Debug, Clone)]
struct MTask {
    id: String,
    queue: String,
    key: Option<String>,
    priority: i32,
    seq: usize,
    state: StoredState,
    run_at: i64,
    attempt: u32,
    attempts_allowed: u32,
    max_attempts: u32,
    fencing: u64,
    /// Every token issued, oldest first; the last is the task's token.
    tokens: Vec<String>,
    lease_ms: i64,
    expires: Option<i64>,
    checkpoint: Option<Vec<u8>>,
    result: Option<Vec<u8>>,
    cancel_requested: bool,
    /// How the newest attempt ended.
    outcome: Option<Outcome>,
    backoff_ms: i64,
}

impl MTask {
    fn token(&self, t: Tok) -> String {
        let n = self.tokens.len();
        match t {
            Tok::Current if n >= 1 => self.tokens[n - 1].clone(),
            Tok::Previous if n >= 2 => self.tokens[n - 2].clone(),
            _ => BOGUS_TOKEN.into(),
        }
    }

    fn live(&self, token: &str, now: i64) -> bool {
        self.state == StoredState::Leased
            && self.tokens.last().map(String::as_str) == Some(token)
            && self.expires.is_some_and(|e| e > now)
    }

    /// A failed attempt (a Fail or an expired lease): where the task goes.
    fn fail(&mut self, now: i64, non_retryable: bool, retry_after: Option<i64>, o: Outcome) {
        self.outcome = Some(o);
        self.expires = None;
        self.state = if self.cancel_requested {
            StoredState::Cancelled
        } else if non_retryable || self.attempt >= self.attempts_allowed {
            StoredState::Dead
        } else {
            self.run_at = now + retry_after.unwrap_or(self.backoff_ms);
            StoredState::Pending
        };
    }
}

/// What a report (Complete or Fail) is allowed to do, per the documented rules.
#[derive(Debug, PartialEq, Eq)]
enum Check {
    Proceed,
    AlreadySettled,
    LeaseLost,
}

fn check(t: &MTask, token: &str, now: i64, settled_as: Outcome) -> Check {
    if t.tokens.last().map(String::as_str) != Some(token) {
        return Check::LeaseLost;
    }
    if t.state == StoredState::Leased {
        return if t.expires.is_some_and(|e| e > now) {
            Check::Proceed
        } else {
            Check::LeaseLost
        };
    }
    if t.outcome == Some(settled_as) {
        Check::AlreadySettled
    } else {
        Check::LeaseLost
    }
}

#[derive(Default)]
struct Model {
    tasks: Vec<MTask>,
    now: i64,
    next_seq: usize,
}

impl Model {
    fn pick(&self, i: &Index) -> Option<usize> {
        (!self.tasks.is_empty()).then(|| i.index(self.tasks.len()))
    }

    /// Ready tasks of these queues in lease order.
    fn ready(&self, queues: &[String]) -> Vec<usize> {
        let mut ready: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| {
                let t = &self.tasks[i];
                t.state == StoredState::Pending && t.run_at <= self.now && queues.contains(&t.queue)
            })
            .collect();
        ready.sort_by_key(|&i| {
            let t = &self.tasks[i];
            (std::cmp::Reverse(t.priority), t.run_at, t.seq)
        });
        ready
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.tasks.iter().position(|t| t.id == id)
    }
}

// ---------------------------------------------------------------- the run

fn t0() -> i64 {
    1_800_000_000_000
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("in range")
}

fn ms_of(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

macro_rules! same {
    ($left:expr, $right:expr, $($ctx:tt)+) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(TestCaseError::fail(format!(
                "{}: store {:?}, model {:?}",
                format!($($ctx)+),
                l,
                r
            )));
        }
    }};
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

fn lease_params(queues: Vec<String>, max: u32, lease_ms: u64, now: i64) -> LeaseParams {
    LeaseParams {
        routing: Default::default(),
        max_reply_bytes: 4 << 20,
        queues,
        max_tasks: max,
        worker_id: "model-worker".into(),
        worker_address: "127.0.0.1:1".into(),
        lease_duration: Duration::from_millis(lease_ms),
        now: at(now),
    }
}

// ---------------------------------------------------------------- stores per case

/// Makes a fresh store for each case.
enum Fresh {
    Sqlite,
    /// A database for the run; a schema per case.
    Postgres {
        db_url: String,
        admin: sqlx::PgPool,
    },
}

impl Fresh {
    async fn open(&self, case: u64) -> (Arc<dyn Store>, Option<tempfile::TempDir>, String) {
        match self {
            Fresh::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let url = format!("sqlite://{}/model.db", dir.path().display());
                let s = store::connect(&url, 2).await.expect("connect");
                s.migrate().await.expect("migrate");
                (s, Some(dir), String::new())
            }
            Fresh::Postgres { db_url, admin } => {
                let schema = format!("model_case_{case}");
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                    .execute(admin)
                    .await
                    .expect("create schema");
                let url = format!("{db_url}?options=-c%20search_path%3D{schema}");
                // One connection: each call starts only after the one before has
                // fully ended. With more, a report that returns early from its
                // transaction (LEASE_LOST) can still hold the row lock for a moment
                // while its rollback is flushed, and a lease on another connection
                // skips the row (SKIP LOCKED): reported with a reproduction in
                // tests/lost_report_lock.rs, not a rule the model checks.
                let s = store::connect(&url, 1).await.expect("connect");
                s.migrate().await.expect("migrate");
                (s, None, schema)
            }
        }
    }

    async fn drop_case(&self, s: Arc<dyn Store>, schema: String) {
        s.close().await;
        if let Fresh::Postgres { admin, .. } = self {
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                .execute(admin)
                .await
                .expect("drop schema");
        }
    }
}

fn cases() -> u32 {
    std::env::var("TASKBROKER_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

fn run_model(backend: Backend, dup_batches: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (fresh, _db) = match backend {
        Backend::Sqlite => (Fresh::Sqlite, None),
        // The model runs on SQLite and Postgres.
        Backend::Mysql => return,
        Backend::Postgres => {
            let Some(db) = rt.block_on(test_db(Backend::Postgres)) else {
                return;
            };
            let admin = rt
                .block_on(sqlx::PgPool::connect(&db.url))
                .expect("connect to the run's database");
            (
                Fresh::Postgres {
                    db_url: db.url.clone(),
                    admin,
                },
                Some(db),
            )
        }
    };
    let cases = cases();
    let mut runner = TestRunner::new(Config {
        cases,
        // Failures are reported with the shrunk sequence; no files are written.
        failure_persistence: None,
        ..Config::default()
    });
    let counter = std::sync::atomic::AtomicU64::new(0);
    let steps = std::sync::atomic::AtomicUsize::new(0);
    let started = std::time::Instant::now();
    let result = runner.run(&prop::collection::vec(op(dup_batches), 1..60), |ops| {
        let case = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if case > 0 && case.is_multiple_of(500) {
            eprintln!(
                "model ({backend:?}): {case} cases so far, {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
        steps.fetch_add(ops.len(), std::sync::atomic::Ordering::Relaxed);
        rt.block_on(async {
            let (s, _dir, schema) = fresh.open(case).await;
            let r = run_case(s.as_ref(), &ops).await;
            fresh.drop_case(s, schema).await;
            if r.is_err() && std::env::var("TASKBROKER_MODEL_RERUN").is_ok() {
                // Does the same sequence fail again on a fresh store (a race, or the rules)?
                let mut again = 0;
                for k in 0..5 {
                    let (s, _dir, schema) = fresh.open(case + 1_000_000 * (k + 1)).await;
                    again += usize::from(run_case(s.as_ref(), &ops).await.is_err());
                    fresh.drop_case(s, schema).await;
                }
                eprintln!("the failing sequence failed again {again} of 5 times");
            }
            r
        })
    });
    eprintln!(
        "model ({backend:?}): {} cases, {} steps, in {:.1} s",
        counter.load(std::sync::atomic::Ordering::Relaxed),
        steps.load(std::sync::atomic::Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn sqlite_store_follows_the_model() {
    run_model(Backend::Sqlite, true);
}

#[test]
fn postgres_store_follows_the_model() {
    run_model(Backend::Postgres, false);
}

/// The same, with a CompleteMany that names one task twice (a stale and a live
/// token, or the live token twice). The model finds `[(task, stale token), (task,
/// live token)]` answered `[applied, applied]`.
#[test]
fn postgres_store_follows_the_model_with_one_task_twice_in_a_batch() {
    run_model(Backend::Postgres, true);
}

// One operation applied to the store and to the model, and their answers compared.
#[path = "model/step.rs"]
mod step;
// Settling in the model, and the whole store compared with the model after each step.
#[path = "model/compare.rs"]
mod compare;
use compare::*;
use step::*;
