//! The Postgres store, for several broker replicas sharing one database.
//!
//! Leasing uses `FOR UPDATE SKIP LOCKED`, so replicas never hand out the same task
//! and never wait on each other's rows; settling and admin changes lock the one row
//! they change. Every change that makes a task pending sends `NOTIFY taskbroker`
//! with the queue name, so long-polls on every replica wake.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use tokio_util::sync::CancellationToken;

use super::row::{
    AttemptEnd, AttemptRow, FailureWrite, TaskRow, decide, duration_ms, from_ms, ms,
    sort_lease_order, state_filter_sql,
};
use super::*;
use crate::domain::task::{Report, SettleCheck, lease_is_live, settle_check};

// Schedules (migration 0006).
mod schedule;
// Routing and the worker registry (migration 0008).
mod routing;
use routing::BindRouting as _;

// The console's dead letters.
mod dead;
// Flow: dependencies, events, bulk operations (migration 0010).
mod events;
mod flow;
use super::flow::{failure_events as flow_failure_events, of_row as flow_of_row};
use crate::domain::event::EventKind;
// Admission (migration 0009).
mod admission;
// The plain lease, for batches routing cannot touch (migration 0012).
mod lease_plain;
// Sync match.
mod sync_match;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// The NOTIFY channel that carries queue names of newly pending tasks.
pub const CHANNEL: &str = "taskbroker";

pub struct PostgresStore {
    pool: PgPool,
    /// The plain lease, the task insert and the sync-matched insert run
    /// here, on connections with generic plans (see [`PostgresStore::connect`]);
    /// None with a single connection (then they run on `pool`).
    hot: Option<PgPool>,
    /// For the notification listener's own connection, outside the pool: a
    /// listener holds its connection for good, and must not starve the calls.
    options: PgConnectOptions,
    /// `@` and a random id of this store (this replica), appended to
    /// the queue name of the wake-ups it sends, so its listener knows them.
    wake_tag: String,
    notes: Arc<Notes>,
}

/// What the listener received (see [`NotificationStats`]).
#[derive(Default)]
struct Notes {
    received: std::sync::atomic::AtomicU64,
    own_skipped: std::sync::atomic::AtomicU64,
}

/// What a notification on [`CHANNEL`] asks of the listener of the store tagged
/// `own`: the payload is a queue name, followed by the sender's tag when a store
/// of this version sent it from a path whose broker wakes its own waiters itself
/// (`queue@id`; queue names have no `@`). An untagged payload (another path, an
/// older replica) always wakes.
fn wake_for<'a>(payload: &'a str, own: &str) -> Option<&'a str> {
    match payload.find('@') {
        Some(at) if &payload[at..] == own => None,
        Some(at) => Some(&payload[..at]),
        None => Some(payload),
    }
}

/// How long a pooled connection may sit idle and still be handed out untested.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The pools' options. sqlx pings every idle connection before handing it out by
/// default: a round trip to Postgres before every store call, most of them on a
/// connection that finished a statement microseconds earlier (measured: 0.07 ms of
/// a lone Submit's 0.79). A connection idle for longer than [`PING_AFTER_IDLE`]
/// (where a restart or a proxy's idle cut is likely to have broken it) is still
/// pinged, and replaced if that fails; one broken while busy fails its statement,
/// as it would have without the ping, and is dropped.
fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

impl PostgresStore {
    pub async fn connect(url: &str, max_connections: u32) -> StoreResult<Self> {
        // Custom plans only: a generic plan of the lease statement, cached while the
        // table was small, reads the whole table on every lease once it is large
        // (a seq scan and sort instead of the ordered lease index), until the next
        // ANALYZE. Planning per execution costs ~1 ms; a bad generic plan, seconds.
        // No JIT: the lease statement's estimated cost (subplans per candidate row)
        // passes the JIT thresholds, and compiling it took 0.2-6 s per execution
        // while the statement itself runs in under a millisecond.
        let options = PgConnectOptions::from_str(url)?
            .options([("plan_cache_mode", "force_custom_plan"), ("jit", "off")]);
        // Planning was three quarters of Postgres's time per task
        // (docs/performance.md, "What limits Postgres: planning"). The statements of
        // the plain lease and of the task inserts keep one generic plan per
        // connection instead, on half of the connections. They name their states
        // as constants (a generic plan cannot match a partial index's predicate
        // against a parameter), and those connections forbid sequential scans, so a
        // plan cached while the table was empty still reads it through its index
        // once it holds millions of rows.
        let hot_connections = max_connections / 2;
        let pool = pool_options()
            .max_connections(max_connections - hot_connections)
            .connect_with(options.clone())
            .await?;
        let hot = if hot_connections == 0 {
            None
        } else {
            let hot = pool_options()
                .max_connections(hot_connections)
                .connect_with(PgConnectOptions::from_str(url)?.options([
                    ("plan_cache_mode", "force_generic_plan"),
                    ("jit", "off"),
                    ("enable_seqscan", "off"),
                ]))
                .await?;
            Some(hot)
        };
        Ok(PostgresStore {
            pool,
            hot,
            options,
            wake_tag: format!("@{:016x}", rand::random::<u64>()),
            notes: Arc::default(),
        })
    }

    /// Where the plain lease and the task inserts run (see [`PostgresStore::connect`]).
    fn hot(&self) -> &PgPool {
        self.hot.as_ref().unwrap_or(&self.pool)
    }

    /// Listens for NOTIFY on [`CHANNEL`] and calls `wake(Some(queue))`; after a
    /// (re)connect, when notifications may have been missed, calls `wake(None)`.
    fn listen(&self, wake: Waker, stop: CancellationToken) {
        let options = self.options.clone();
        let (tag, notes) = (self.wake_tag.clone(), self.notes.clone());
        tokio::spawn(async move {
            loop {
                let listener = async {
                    // A pool of its own with one connection, kept for good.
                    let own = PgPoolOptions::new()
                        .max_connections(1)
                        .idle_timeout(None)
                        .max_lifetime(None)
                        .acquire_timeout(Duration::from_secs(5))
                        .connect_with(options.clone())
                        .await?;
                    let mut l = PgListener::connect_with(&own).await?;
                    l.listen(CHANNEL).await?;
                    wake(None);
                    loop {
                        match l.try_recv().await? {
                            Some(n) => {
                                use std::sync::atomic::Ordering::Relaxed;
                                notes.received.fetch_add(1, Relaxed);
                                match wake_for(n.payload(), &tag) {
                                    Some(q) => wake(Some(q)),
                                    // Its broker woke its waiters when it committed.
                                    None => _ = notes.own_skipped.fetch_add(1, Relaxed),
                                }
                            }
                            // The connection dropped and was re-established.
                            None => wake(None),
                        }
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), sqlx::Error>(())
                };
                tokio::select! {
                    _ = stop.cancelled() => return,
                    res = listener => {
                        if let Err(e) = res {
                            tracing::warn!(error = %e, "notification listener failed; retrying");
                        }
                    }
                }
                // Keep the retry gentle while the database is away.
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        });
    }

    async fn fetch_task(
        tx: &mut Transaction<'_, Postgres>,
        id: &str,
    ) -> StoreResult<Option<TaskRow>> {
        Ok(
            sqlx::query_as::<_, TaskRow>("SELECT * FROM tasks WHERE id = $1 FOR UPDATE")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?,
        )
    }

    async fn notify(tx: &mut Transaction<'_, Postgres>, queues: &[&str]) -> StoreResult<()> {
        if queues.is_empty() {
            return Ok(());
        }
        sqlx::query("SELECT pg_notify($1, q) FROM UNNEST($2::text[]) AS q")
            .bind(CHANNEL)
            .bind(queues)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    async fn check(
        tx: &mut Transaction<'_, Postgres>,
        row: &TaskRow,
        report: Report,
        token: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<SettleCheck> {
        let state = row.stored_state()?;
        let outcome = if state == StoredState::Leased {
            None
        } else {
            let outcome: Option<String> = sqlx::query_scalar(
                "SELECT outcome FROM task_attempts WHERE task_id = $1 AND attempt = $2",
            )
            .bind(&row.id)
            .bind(row.attempt)
            .fetch_optional(&mut **tx)
            .await?;
            outcome.as_deref().and_then(AttemptOutcome::parse)
        };
        Ok(settle_check(
            state,
            row.lease_token.as_deref(),
            row.lease_expires_at.map(from_ms),
            outcome,
            report,
            token,
            now,
        ))
    }

    /// Writes the attempt row of an attempt that ends now; returns when it was leased.
    async fn finish_attempt(
        tx: &mut Transaction<'_, Postgres>,
        a: &AttemptEnd<'_>,
        outcome: AttemptOutcome,
        error: Option<&str>,
        now: i64,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        sqlx::query(
            "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at, \
             outcome, error, finished_at, fencing_token) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (task_id, attempt) DO UPDATE SET outcome = excluded.outcome, \
             error = excluded.error, finished_at = excluded.finished_at",
        )
        .bind(a.task_id)
        .bind(a.attempt)
        .bind(a.worker_id)
        .bind(a.worker_address)
        .bind(a.leased_at)
        .bind(outcome.as_str())
        .bind(error)
        .bind(now)
        .bind(a.fencing_token)
        .execute(&mut **tx)
        .await?;
        Ok(Some(from_ms(a.leased_at)))
    }

    async fn write_failure(
        tx: &mut Transaction<'_, Postgres>,
        row: &TaskRow,
        write: &FailureWrite,
        error: &str,
        outcome: AttemptOutcome,
        now: i64,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        sqlx::query(
            "UPDATE tasks SET state = $1, run_at = $2, finished_at = $3, last_error = $4, \
             lease_expires_at = NULL, updated_at = $5 WHERE seq = $6",
        )
        .bind(write.state.as_str())
        .bind(write.run_at)
        .bind(write.finished_at)
        .bind(error)
        .bind(now)
        .bind(row.seq)
        .execute(&mut **tx)
        .await?;
        // Flow: the failure and what follows it.
        let evs = flow_failure_events(row, write.state.as_str(), write.run_at, error, now);
        events::record(tx, &evs).await?;
        let leased_at =
            Self::finish_attempt(tx, &row.attempt_end(), outcome, Some(error), now).await?;
        if write.state == StoredState::Pending {
            Self::notify(tx, &[&row.queue]).await?;
        }
        Ok(leased_at)
    }

    /// Answers the completions that the one-statement path did not settle, in one
    /// read: unknown task, a repeated Complete of a settled lease, or a lost lease.
    /// A lease that is live by now (it cannot be, short of a clock step between the
    /// two statements) is settled on its own.
    async fn complete_checked_many(
        &self,
        ps: &[&CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>> {
        let ids: Vec<&str> = ps.iter().map(|p| p.task_id.as_str()).collect();
        /// id, queue, state, lease token, lease expiry, outcome of the latest attempt.
        type Checked = (
            String,
            String,
            String,
            Option<String>,
            Option<i64>,
            Option<String>,
        );
        let rows: Vec<Checked> = sqlx::query_as(
            "SELECT t.id, t.queue, t.state, t.lease_token, t.lease_expires_at, a.outcome \
                 FROM tasks t LEFT JOIN task_attempts a \
                   ON a.task_id = t.id AND a.attempt = t.attempt \
                 WHERE t.id = ANY($1)",
        )
        .bind(&ids)
        .fetch_all(&self.pool)
        .await?;
        let rows: std::collections::HashMap<&str, _> =
            rows.iter().map(|r| (r.0.as_str(), r)).collect();
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            let Some((_, queue, state, token, expires, outcome)) =
                rows.get(p.task_id.as_str()).copied()
            else {
                out.push(Settled::NotFound);
                continue;
            };
            let state = StoredState::parse(state).ok_or_else(|| {
                StoreError::Corrupt(format!("task {} state {state:?}", p.task_id))
            })?;
            let check = settle_check(
                state,
                token.as_deref(),
                expires.map(from_ms),
                outcome.as_deref().and_then(AttemptOutcome::parse),
                Report::Complete,
                &p.lease_token,
                p.now,
            );
            out.push(match check {
                SettleCheck::LeaseLost => Settled::LeaseLost,
                SettleCheck::AlreadySettled => Settled::AlreadySettled(Completed {
                    queue: queue.clone(),
                    leased_at: None,
                }),
                SettleCheck::Proceed => self.complete_checked(p).await?,
            });
        }
        Ok(out)
    }

    /// Completes one task under a row lock: finds out why the one-statement path
    /// did not settle it (unknown task, repeated Complete, lost lease) and settles
    /// it if it may.
    async fn complete_checked(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
        let now = ms(p.now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            tx.rollback().await?;
            return Ok(Settled::NotFound);
        };
        match Self::check(&mut tx, &row, Report::Complete, &p.lease_token, p.now).await? {
            SettleCheck::LeaseLost => {
                tx.rollback().await?;
                return Ok(Settled::LeaseLost);
            }
            SettleCheck::AlreadySettled => {
                tx.rollback().await?;
                return Ok(Settled::AlreadySettled(Completed {
                    queue: row.queue,
                    leased_at: None,
                }));
            }
            SettleCheck::Proceed => {}
        }
        sqlx::query(
            "UPDATE tasks SET state = 'succeeded', result = $1, finished_at = $2, \
             lease_expires_at = NULL, updated_at = $2 WHERE seq = $3",
        )
        .bind(&p.result)
        .bind(now)
        .bind(row.seq)
        .execute(&mut *tx)
        .await?;
        let mut ev = flow_of_row(&row, EventKind::Succeeded, now);
        ev.state = "succeeded";
        events::record(&mut tx, &[ev]).await?;
        let outcome = AttemptOutcome::Succeeded;
        let leased_at =
            Self::finish_attempt(&mut tx, &row.attempt_end(), outcome, None, now).await?;
        tx.commit().await?;
        Ok(Settled::Applied(Completed {
            queue: row.queue,
            leased_at,
        }))
    }

    /// Inserts tasks (see `Store::task_insert_many`) on one connection, which may
    /// be in a transaction (Flow inserts tasks with dependencies in one).
    /// `tag`: appended to the wake-up's queue name: the store's own tag
    /// when the broker wakes its own waiters after the commit, else "".
    pub(super) async fn insert_on(
        conn: &mut sqlx::PgConnection,
        tasks: &[NewTask],
        now: DateTime<Utc>,
        tag: &str,
    ) -> StoreResult<Vec<Inserted>> {
        // One multi-row statement (one round trip, one commit) for the whole batch;
        // it also notifies the queues that got tasks, in the same transaction.
        let col = |f: &dyn Fn(&NewTask) -> i64| tasks.iter().map(f).collect::<Vec<i64>>();
        let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        let queues: Vec<&str> = tasks.iter().map(|t| t.queue.as_str()).collect();
        let keys: Vec<Option<&str>> = tasks.iter().map(|t| t.key.as_deref()).collect();
        let payloads: Vec<&[u8]> = tasks.iter().map(|t| t.payload.as_slice()).collect();
        let deadlines: Vec<Option<i64>> = tasks.iter().map(|t| t.deadline.map(ms)).collect();
        let multipliers: Vec<f64> = tasks.iter().map(|t| t.retry.backoff_multiplier).collect();
        let jitters: Vec<f64> = tasks.iter().map(|t| t.retry.jitter).collect();
        let metadata: Vec<String> = tasks
            .iter()
            .map(|t| serde_json::to_string(&t.metadata).unwrap_or_else(|_| "{}".into()))
            .collect();
        let concurrency_keys: Vec<Option<&str>> =
            tasks.iter().map(|t| t.concurrency_key.as_deref()).collect();
        // Routing: a batch with routed tasks inserts their routing
        // columns too (the same statement with more arrays, in routing.rs).
        let routed = tasks.iter().any(|t| routing::is_routed(&t.routing));
        let sql = by_keys(tasks, INSERT_PLAIN, &INSERT_PLAIN_KEYLESS);
        let inserted: Vec<String> = sqlx::query_scalar(routing::insert_sql(routed, sql))
            .bind(&ids)
            .bind(&queues)
            .bind(&keys)
            .bind(&payloads)
            .bind(col(&|t| i64::from(t.priority)))
            .bind(col(&|t| ms(t.run_at)))
            .bind(&deadlines)
            .bind(col(&|t| i64::from(t.retry.max_attempts)))
            .bind(col(&|t| duration_ms(t.retry.initial_backoff)))
            .bind(&multipliers)
            .bind(col(&|t| duration_ms(t.retry.max_backoff)))
            .bind(&jitters)
            .bind(&metadata)
            .bind(ms(now))
            .bind(tag)
            .bind(&concurrency_keys)
            .bind_routing(routed, tasks)
            .fetch_all(&mut *conn)
            .await?;
        let inserted: std::collections::HashSet<String> = inserted.into_iter().collect();
        // The rest were duplicates of a (queue, key): answer with the existing ids.
        let dups: Vec<&NewTask> = tasks.iter().filter(|t| !inserted.contains(&t.id)).collect();
        let mut existing = std::collections::HashMap::new();
        if !dups.is_empty() {
            let q: Vec<&str> = dups.iter().map(|t| t.queue.as_str()).collect();
            let k: Vec<Option<&str>> = dups.iter().map(|t| t.key.as_deref()).collect();
            let rows: Vec<(String, String, String)> = sqlx::query_as(
                "SELECT t.queue, t.key, t.id FROM tasks t \
                 JOIN UNNEST($1::text[], $2::text[]) AS u(queue, key) \
                   ON t.queue = u.queue AND t.key = u.key",
            )
            .bind(&q)
            .bind(&k)
            .fetch_all(&mut *conn)
            .await?;
            existing = rows.into_iter().map(|(q, k, id)| ((q, k), id)).collect();
        }
        tasks
            .iter()
            .map(|t| {
                if inserted.contains(&t.id) {
                    return Ok(Inserted {
                        task_id: t.id.clone(),
                        deduplicated: false,
                    });
                }
                let key = (t.queue.clone(), t.key.clone().unwrap_or_default());
                existing
                    .get(&key)
                    .map(|id| Inserted {
                        task_id: id.clone(),
                        deduplicated: true,
                    })
                    .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))
            })
            .collect()
    }

    /// The task as it is after a change, which is recorded as a `kind` event (Flow).
    async fn changed_event(
        tx: &mut Transaction<'_, Postgres>,
        id: &str,
        kind: EventKind,
        now: i64,
    ) -> StoreResult<Changed> {
        match Self::fetch_task(tx, id).await? {
            Some(row) => {
                events::record(tx, &[flow_of_row(&row, kind, now)]).await?;
                Ok(Changed::Done(Box::new(row.into_record()?)))
            }
            None => Ok(Changed::NotFound),
        }
    }
}

/// The task insert (see `PostgresStore::insert_on`): one multi-row statement that also
/// records the `submitted` events and notifies the queues that got tasks.
const INSERT_PLAIN: &str = concat!(
    "WITH ins AS ( \
       INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, \
         max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
         max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key) \
       SELECT id, queue, key, payload, priority, run_at, deadline, 'pending', \
         max_attempts, max_attempts, ib, bm, mb, j, md, $14, $14, ck \
       FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::float8[], \
         $11::bigint[], $12::float8[], $13::text[], $16::text[]) \
         AS u(id, queue, key, payload, priority, run_at, deadline, max_attempts, \
              ib, bm, mb, j, md, ck) \
       ON CONFLICT DO NOTHING RETURNING id, queue, run_at), \
     ev AS (",
    events::event_insert!(),
    "SELECT ",
    events::event_base!(),
    " + row_number() OVER () - 1, id, queue, 'submitted', \
       CASE WHEN run_at > $14 THEN 'scheduled' ELSE 'ready' END, 0, NULL, $14, NULL \
       FROM ins), \
     woken AS (SELECT pg_notify('taskbroker', q || $15) \
       FROM (SELECT DISTINCT queue AS q FROM ins) d) \
     SELECT id FROM ins WHERE (SELECT count(*) FROM woken) >= 0"
);

/// [`INSERT_PLAIN`] for a batch in which no task carries a key.
static INSERT_PLAIN_KEYLESS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| keyless(INSERT_PLAIN));

/// `sql` without its `ON CONFLICT DO NOTHING`: for batches of tasks without keys,
/// whose new ids cannot collide.
pub(super) fn keyless(sql: &str) -> String {
    let out = sql.replacen("ON CONFLICT DO NOTHING ", "", 1);
    debug_assert_ne!(out, sql, "no ON CONFLICT DO NOTHING to drop");
    out
}

/// The insert for `tasks`: `keyed` when one carries a key, else its [`keyless`]
/// form. A batch without keys cannot collide (ids are new UUIDv7s), and a plain
/// INSERT skips the speculative insertion of ON CONFLICT, which probes every unique
/// index first and writes a confirmation record per row.
pub(super) fn by_keys(
    tasks: &[NewTask],
    keyed: &'static str,
    keyless: &'static std::sync::LazyLock<String>,
) -> &'static str {
    if tasks.iter().any(|t| t.key.is_some()) {
        keyed
    } else {
        keyless.as_str()
    }
}

/// Routing: whether the worker of request `i` (1-based) may take the
/// `tasks` row at hand: its target (id, every label), a retry reserved for
/// another worker, a fan-out copy of a group this worker holds or completed, a
/// capped queue in which it has no room. Each test reads only columns of the row
/// unless the row carries that rule.
macro_rules! routing_may_take {
    () => {
        "((target_worker IS NULL OR target_worker = ($4::text[])[i]) \
          AND (target_labels IS NULL OR target_labels::jsonb <@ ($12::text[])[i]::jsonb) \
          AND (reserved_for IS NULL OR reserved_for = ($4::text[])[i] OR reserved_until <= $2) \
          AND (NOT fanout_distinct OR NOT EXISTS (SELECT 1 FROM tasks c \
            WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ($4::text[])[i] \
              AND c.state IN ('leased', 'succeeded'))) \
          AND (q.cap = 0 OR EXISTS (SELECT 1 FROM room r \
            WHERE r.name = q.name AND r.req = i AND r.room > 0)))"
    };
}

/// Routing: whether every request of the batch may take the row at
/// hand, so it is shared out by slots like any task: no target other than labels
/// that all requests carry ($13, their common labels, NULL when they differ), no
/// reservation, no distinct fan-out group, an uncapped queue.
macro_rules! routing_open {
    () => {
        "(target_worker IS NULL \
          AND (target_labels IS NULL OR target_labels::jsonb <@ $13::jsonb) \
          AND reserved_for IS NULL AND NOT fanout_distinct AND q.cap = 0)"
    };
}

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await.map_err(StoreError::Migrate)
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>> {
        let mut conn = self.hot().acquire().await?;
        // The broker wakes its own waiters after the commit.
        Self::insert_on(&mut conn, tasks, now, &self.wake_tag).await
    }

    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
        let mut leased = self.task_lease_many(std::slice::from_ref(p)).await?;
        Ok(leased.pop().unwrap_or_default())
    }

    async fn task_lease_many(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        let Some(first) = ps.first() else {
            return Ok(Vec::new());
        };
        // A batch without labels or caps, in queues without READY routed
        // tasks, takes the statement from before routing (lease_plain.rs).
        if let Some(out) = self.lease_plain(ps).await? {
            return Ok(out);
        }
        let now = ms(ps.iter().map(|p| p.now).max().unwrap_or(first.now));
        let demand: i64 = ps.iter().map(|p| i64::from(p.max_tasks)).sum();
        let workers: Vec<&str> = ps.iter().map(|p| p.worker_id.as_str()).collect();
        let addresses: Vec<&str> = ps.iter().map(|p| p.worker_address.as_str()).collect();
        let durations: Vec<i64> = ps.iter().map(|p| duration_ms(p.lease_duration)).collect();
        let wanted: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
        // The request of each slot, 1-based, for the n-th task in lease order.
        let owners: Vec<i32> = lease_slots(&wanted)
            .into_iter()
            .map(|i| i32::try_from(i + 1).unwrap_or(i32::MAX))
            .collect();
        // Routing: each request's labels, each queue's per-worker cap
        // (0: none), each request's max_tasks.
        let labels: Vec<String> = ps.iter().map(|p| p.routing.labels_json()).collect();
        let common_labels: Option<&String> = labels
            .first()
            .filter(|l| labels.iter().all(|other| other == *l));
        let caps: Vec<i32> = first.routing.caps(&first.queues);
        let wants: Vec<i32> = wanted
            .iter()
            .map(|&w| i32::try_from(w).unwrap_or(i32::MAX))
            .collect();
        // One statement for every request: the tasks are picked as for one lease of
        // the total (one index-ordered scan per queue, each reading only its first
        // rows, merged; rows another broker holds are skipped, never waited for), and
        // the n-th goes to the request that owns slot n. Per-request values are
        // looked up in arrays, not joined, so the plan is the plan of a single lease
        // (a join's row estimate would invite a scan of the table). The deadline test
        // is a COALESCE, not an OR: statistics rarely see a queue's transient pending
        // rows, and on that estimate the planner turned the OR into two bitmap scans
        // and sorted every pending row of the queue per lease (45 ms instead of
        // 0.4 ms with 20,000 pending); as a filter it keeps the ordered index scan.
        //
        // A request takes its tasks while their bytes stay within the reply budget
        // (and always its first). Rows that were locked here but not taken
        // (over the budget, or beyond the demand in a lease over several queues) are
        // announced with NOTIFY, which is sent at commit when their locks go: a
        // lease on another replica that skipped them may have found nothing and
        // gone to sleep.
        //
        // Routing adds: `room`, the leases each request's worker may
        // still take of each capped queue; in `cand`, a task that no request of
        // this batch may take is passed over (not locked, never blocking the
        // tasks behind it), and `elig` lists the requests that may take it (NULL:
        // all, the cheap case of an untargeted task in an uncapped queue); in
        // `ranked`, such a task goes to one of those requests; `routed` keeps
        // each request within its max_tasks, its cap and one copy per distinct
        // fan-out group.
        let rows: Vec<(TaskRow, i64)> = sqlx::query(concat!(
            "WITH room AS ( \
               SELECT q.name, i AS req, q.cap - ( \
                 SELECT count(*) FROM tasks h WHERE h.state = 'leased' \
                   AND h.leased_by = ($4::text[])[i] AND h.queue = q.name) AS room \
               FROM UNNEST($1::text[], $10::int[]) AS q(name, cap), \
                 generate_subscripts($4::text[], 1) AS i \
               WHERE q.cap > 0), \
             cand AS ( \
               SELECT t.* FROM UNNEST($1::text[], $10::int[]) AS q(name, cap) \
               CROSS JOIN LATERAL ( \
                 SELECT seq, queue, priority, deadline, run_at, \
                   octet_length(payload) + COALESCE(octet_length(checkpoint), 0) \
                     + octet_length(metadata) + $9::bigint AS size, \
                   CASE WHEN ", routing_open!(), " THEN NULL ELSE ARRAY( \
                     SELECT i FROM generate_subscripts($4::text[], 1) AS i WHERE ", routing_may_take!(), " \
                     ORDER BY i) END AS elig, \
                   fanout_group, fanout_distinct \
                 FROM tasks \
                 WHERE state = 'pending' AND queue = q.name \
                   AND run_at <= $2 AND COALESCE(deadline, 9223372036854775807) > $2 \
                   AND (q.cap = 0 OR EXISTS (SELECT 1 FROM room r WHERE r.name = q.name AND r.room > 0)) \
                   AND (", routing_open!(), " \
                     OR EXISTS (SELECT 1 FROM generate_subscripts($4::text[], 1) AS i \
                       WHERE ", routing_may_take!(), ")) \
                 ORDER BY priority DESC, deadline ASC NULLS LAST, run_at, seq \
                 LIMIT $3 FOR UPDATE SKIP LOCKED) t), \
             ranked AS ( \
               SELECT t.seq, t.size, t.rn, t.queue, t.fanout_group, t.fanout_distinct, \
                 CASE WHEN t.elig IS NULL THEN ($7::int[])[t.rn] \
                   ELSE t.elig[1 + (t.rn - 1) % NULLIF(cardinality(t.elig), 0)] END AS req FROM ( \
                 SELECT c.seq, c.size, c.elig, c.queue, c.fanout_group, c.fanout_distinct, \
                   row_number() OVER ( \
                   ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq) AS rn \
                 FROM cand c \
                 ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq \
                 LIMIT $3) t), \
             routed AS ( \
               SELECT seq, size, rn, req FROM ( \
                 SELECT r.*, \
                   row_number() OVER (PARTITION BY r.req ORDER BY r.rn) AS nth, \
                   row_number() OVER (PARTITION BY r.req, r.fanout_group ORDER BY r.rn) AS nth_copy, \
                   row_number() OVER (PARTITION BY r.req, r.queue ORDER BY r.rn) AS nth_queue \
                 FROM ranked r WHERE r.req IS NOT NULL) r \
               WHERE nth <= ($11::int[])[req] \
                 AND (NOT fanout_distinct OR nth_copy = 1) \
                 AND nth_queue <= COALESCE((SELECT m.room FROM room m \
                   WHERE m.name = r.queue AND m.req = r.req), 2147483647)), \
             picked AS ( \
               SELECT seq, req FROM ( \
                 SELECT seq, req, size, sum(size) OVER (PARTITION BY req ORDER BY rn) AS total \
                 FROM routed) r \
               WHERE total <= $8 OR total = size), \
             spare AS ( \
               SELECT pg_notify('taskbroker', s.queue) FROM ( \
                 SELECT DISTINCT queue FROM cand \
                 WHERE seq NOT IN (SELECT seq FROM picked)) s), \
             leased AS ( \
               UPDATE tasks t SET state = 'leased', attempt = t.attempt + 1, \
                 fencing_token = t.fencing_token + 1, lease_token = gen_random_uuid()::text, \
                 leased_by = ($4::text[])[p.req], lease_duration_ms = ($6::bigint[])[p.req], \
                 lease_expires_at = LEAST($2 + ($6::bigint[])[p.req], \
                   COALESCE(t.deadline, $2 + ($6::bigint[])[p.req])), \
                 updated_at = $2, leased_at = $2, leased_address = ($5::text[])[p.req] \
               FROM picked p WHERE t.seq = p.seq \
               RETURNING t.*, p.req::bigint AS request), \
             ev AS (", events::event_insert!(), "SELECT ", events::event_base!(),
               " + row_number() OVER () - 1, id, queue, 'leased', 'leased', attempt, leased_by, \
               $2, NULL FROM leased) \
             SELECT leased.*, (SELECT count(*) FROM spare) AS spare FROM leased",
        ))
        .bind(&first.queues)
        .bind(now)
        .bind(demand)
        .bind(&workers)
        .bind(&addresses)
        .bind(&durations)
        .bind(&owners)
        .bind(i64::try_from(first.max_reply_bytes).unwrap_or(i64::MAX))
        .bind(LEASE_REPLY_TASK_BYTES)
        .bind(&caps)
        .bind(&wants)
        .bind(&labels)
        .bind(common_labels)
        .try_map(|row: sqlx::postgres::PgRow| {
            use sqlx::{FromRow, Row};
            Ok((TaskRow::from_row(&row)?, row.try_get::<i64, _>("request")?))
        })
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<Vec<TaskRecord>> = ps.iter().map(|_| Vec::new()).collect();
        for (row, request) in rows {
            let slot = usize::try_from(request - 1)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| StoreError::Corrupt(format!("lease for request {request}")))?;
            slot.push(row.into_record()?);
        }
        for records in &mut out {
            sort_lease_order(records);
        }
        Ok(out)
    }

    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let next: Option<i64> = sqlx::query_scalar(
            "SELECT MIN(run_at) FROM tasks WHERE state = 'pending' AND queue = ANY($1) \
             AND run_at > $2",
        )
        .bind(queues)
        .bind(ms(now))
        .fetch_one(self.hot())
        .await?;
        Ok(next.map(from_ms))
    }

    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>> {
        let ids: Vec<&str> = leases.iter().map(|l| l.task_id.as_str()).collect();
        let tokens: Vec<&str> = leases.iter().map(|l| l.lease_token.as_str()).collect();
        let rows: Vec<(String, String, i64, bool)> = sqlx::query_as(
            "UPDATE tasks t SET lease_expires_at = \
               LEAST($1 + COALESCE($2, t.lease_duration_ms), COALESCE(t.deadline, $1 + COALESCE($2, t.lease_duration_ms))), \
               updated_at = $1 \
             FROM UNNEST($3::text[], $4::text[]) AS l(id, token) \
             WHERE t.id = l.id AND t.state = 'leased' AND t.lease_token = l.token \
               AND t.lease_expires_at > $1 AND (t.deadline IS NULL OR t.deadline > $1) \
             RETURNING t.id, t.lease_token, t.lease_expires_at, t.cancel_requested",
        )
        .bind(ms(now))
        .bind(extend_by.map(duration_ms))
        .bind(&ids)
        .bind(&tokens)
        .fetch_all(&self.pool)
        .await?;
        Ok(leases
            .iter()
            .map(|l| {
                rows.iter()
                    .find(|r| r.0 == l.task_id && r.1 == l.lease_token)
                    .map_or(LeaseState::Lost, |r| LeaseState::Live {
                        lease_expires_at: from_ms(r.2),
                        cancel_requested: r.3,
                    })
            })
            .collect())
    }

    async fn task_checkpoint(&self, p: &CheckpointParams) -> StoreResult<Settled<LeaseState>> {
        let now = ms(p.now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            tx.rollback().await?;
            return Ok(Settled::NotFound);
        };
        let live = lease_is_live(
            row.stored_state()?,
            row.lease_token.as_deref(),
            row.lease_expires_at.map(from_ms),
            &p.lease_token,
            p.now,
        );
        if !live {
            tx.rollback().await?;
            return Ok(Settled::LeaseLost);
        }
        let (at, cancel_requested): (i64, bool) = sqlx::query_as(
            "UPDATE tasks SET checkpoint = $1, lease_expires_at = CASE WHEN $2::bigint IS NULL \
               THEN lease_expires_at ELSE LEAST($3 + $2, COALESCE(deadline, $3 + $2)) END, \
               updated_at = $3 WHERE seq = $4 RETURNING lease_expires_at, cancel_requested",
        )
        .bind(&p.checkpoint)
        .bind(p.extend_by.map(duration_ms))
        .bind(now)
        .bind(row.seq)
        .fetch_one(&mut *tx)
        .await?;
        events::record(&mut tx, &[flow_of_row(&row, EventKind::Checkpointed, now)]).await?;
        tx.commit().await?;
        Ok(Settled::Applied(LeaseState::Live {
            lease_expires_at: from_ms(at),
            cancel_requested,
        }))
    }

    async fn task_complete(&self, p: &CompleteParams) -> StoreResult<Settled<Completed>> {
        let mut settled = self.task_complete_many(std::slice::from_ref(p)).await?;
        settled
            .pop()
            .ok_or_else(|| StoreError::Corrupt("no completion outcome".into()))
    }

    async fn task_complete_many(
        &self,
        ps: &[CompleteParams],
    ) -> StoreResult<Vec<Settled<Completed>>> {
        if ps.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = ps.iter().map(|p| p.task_id.as_str()).collect();
        let tokens: Vec<&str> = ps.iter().map(|p| p.lease_token.as_str()).collect();
        let results: Vec<&[u8]> = ps.iter().map(|p| p.result.as_slice()).collect();
        // Each item keeps its own clock: combined calls come from different callers.
        let nows: Vec<i64> = ps.iter().map(|p| ms(p.now)).collect();
        // Live leases settle in one statement, with their attempts. The lease check
        // is a CASE so the planner cannot use it for an index: rows are always
        // found by id (on young statistics it would otherwise scan every lease).
        // `id = ANY($1)` hands the planner the ids themselves, so it probes the
        // id index: joined to `input` alone it hashed the whole table, finished
        // tasks included, for every batch (docs/performance.md, "Settle"). The
        // answer reads `t` alone: joined to the attempts' RETURNING, a generic plan
        // (which expects one row from each) looped over one for every row of the other.
        // Each settled row answers with the token that settled it, so a stale
        // token naming the same task in the same batch is never taken for it.
        let done: Vec<(String, String, String, i64)> = sqlx::query_as(concat!(
            "WITH input AS ( \
               SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[]) \
                 AS i(id, token, result, now)), \
             t AS ( \
               UPDATE tasks SET state = 'succeeded', result = input.result, \
                 finished_at = input.now, lease_expires_at = NULL, updated_at = input.now \
               FROM input WHERE tasks.id = input.id AND tasks.id = ANY($1::text[]) \
                 AND CASE WHEN tasks.state = 'leased' \
                 AND tasks.lease_token = input.token AND tasks.lease_expires_at > input.now \
                 THEN true ELSE false END \
               RETURNING tasks.id, input.token, input.now, tasks.attempt, tasks.queue, \
                 tasks.leased_by, tasks.leased_address, \
                 COALESCE(tasks.leased_at, tasks.updated_at) AS leased_at, tasks.fencing_token), \
             a AS ( \
               INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, \
                 leased_at, outcome, finished_at, fencing_token) \
               SELECT id, attempt, COALESCE(leased_by, ''), COALESCE(leased_address, ''), \
                 leased_at, 'succeeded', now, fencing_token FROM t \
               ON CONFLICT (task_id, attempt) DO UPDATE SET outcome = excluded.outcome, \
                 finished_at = excluded.finished_at \
               ), \
             ev AS (",
            events::event_insert!(),
            "SELECT ",
            events::event_base!(),
            " + row_number() OVER () - 1, id, queue, 'succeeded', 'succeeded', attempt, \
               leased_by, now, NULL FROM t) \
             SELECT t.id, t.token, t.queue, t.leased_at FROM t"
        ))
        .bind(&ids)
        .bind(&tokens)
        .bind(&results)
        .bind(&nows)
        .fetch_all(self.hot())
        .await?;
        let mut done: std::collections::HashMap<(String, String), (String, i64)> = done
            .into_iter()
            .map(|(id, token, queue, leased_at)| ((id, token), (queue, leased_at)))
            .collect();
        let mut out: Vec<Option<Settled<Completed>>> = ps
            .iter()
            .map(|p| {
                done.remove(&(p.task_id.clone(), p.lease_token.clone()))
                    .map(|(queue, leased_at)| {
                        Settled::Applied(Completed {
                            queue,
                            leased_at: Some(from_ms(leased_at)),
                        })
                    })
            })
            .collect();
        // The rest (unknown, repeated, lost, or named twice) are answered by one
        // read: none of them can settle now, since the statement above settled
        // every live lease it was given.
        let rest: Vec<usize> = (0..ps.len()).filter(|&i| out[i].is_none()).collect();
        if !rest.is_empty() {
            let checked = self
                .complete_checked_many(&rest.iter().map(|&i| &ps[i]).collect::<Vec<_>>())
                .await?;
            for (i, settled) in rest.into_iter().zip(checked) {
                out[i] = Some(settled);
            }
        }
        out.into_iter()
            .map(|s| s.ok_or_else(|| StoreError::Corrupt("no completion outcome".into())))
            .collect()
    }

    async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>> {
        let now = ms(p.now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, &p.task_id).await? else {
            tx.rollback().await?;
            return Ok(Settled::NotFound);
        };
        match Self::check(&mut tx, &row, Report::Fail, &p.lease_token, p.now).await? {
            SettleCheck::LeaseLost => {
                tx.rollback().await?;
                return Ok(Settled::LeaseLost);
            }
            SettleCheck::AlreadySettled => {
                let state = TaskState::of(row.stored_state()?, from_ms(row.run_at), p.now);
                let next_run_at = (row.state == "pending").then(|| from_ms(row.run_at));
                tx.rollback().await?;
                return Ok(Settled::AlreadySettled(FailResult {
                    queue: row.queue,
                    state,
                    next_run_at,
                    leased_at: None,
                }));
            }
            SettleCheck::Proceed => {}
        }
        let decision = decide(&row, p.non_retryable, p.retry_after, p.now, p.jitter_unit);
        let write = FailureWrite::new(&row, decision, now);
        let outcome = AttemptOutcome::Failed;
        let leased_at = Self::write_failure(&mut tx, &row, &write, &p.error, outcome, now).await?;
        if write.state == StoredState::Pending {
            // Routing: a sticky retry is kept for this worker.
            routing::reserve_retry(&mut tx, &row, p).await?;
        }
        tx.commit().await?;
        Ok(Settled::Applied(FailResult {
            queue: row.queue,
            state: TaskState::of(write.state, from_ms(write.run_at), p.now),
            next_run_at: decision.run_at(),
            leased_at,
        }))
    }

    async fn lease_reclaim_expired(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Reaped> {
        let now_dt = now;
        let now = ms(now);
        let mut reaped = Reaped::default();
        let mut tx = self.pool.begin().await?;
        let past_deadline = sqlx::query_as::<_, TaskRow>(
            "SELECT * FROM tasks WHERE deadline IS NOT NULL AND deadline <= $1 \
             AND state IN ('pending', 'leased') LIMIT $2 FOR UPDATE SKIP LOCKED",
        )
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        for row in &past_deadline {
            let write = FailureWrite {
                state: StoredState::Dead,
                run_at: row.run_at,
                finished_at: Some(now),
            };
            let error = "DEADLINE_EXCEEDED";
            if row.state == "leased" {
                let outcome = AttemptOutcome::DeadlineExceeded;
                Self::write_failure(&mut tx, row, &write, error, outcome, now).await?;
            } else {
                sqlx::query(
                    "UPDATE tasks SET state = 'dead', finished_at = $1, last_error = $2, \
                     updated_at = $1 WHERE seq = $3",
                )
                .bind(now)
                .bind(error)
                .bind(row.seq)
                .execute(&mut *tx)
                .await?;
                let evs = flow_failure_events(row, "dead", row.run_at, error, now);
                events::record(&mut tx, &evs).await?;
            }
            reaped.deadline_exceeded += 1;
            reaped.by_queue.entry(row.queue.clone()).or_default().dead += 1;
        }
        let expired = sqlx::query_as::<_, TaskRow>(
            "SELECT * FROM tasks WHERE state = 'leased' AND lease_expires_at <= $1 \
             LIMIT $2 FOR UPDATE SKIP LOCKED",
        )
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        for row in &expired {
            let decision = decide(row, false, None, now_dt, rand::random());
            let write = FailureWrite::new(row, decision, now);
            let outcome = AttemptOutcome::LeaseExpired;
            Self::write_failure(&mut tx, row, &write, "lease expired", outcome, now).await?;
            if write.state == StoredState::Pending && !reaped.queues.contains(&row.queue) {
                reaped.queues.push(row.queue.clone());
            }
            reaped.reclaimed += 1;
            let q = reaped.by_queue.entry(row.queue.clone()).or_default();
            q.reclaimed += 1;
            q.dead += u64::from(write.state == StoredState::Dead);
        }
        tx.commit().await?;
        Ok(reaped)
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>> {
        sqlx::query_as::<_, TaskRow>("SELECT * FROM tasks WHERE id = $1")
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?
            .map(TaskRow::into_record)
            .transpose()
    }

    async fn task_find_keys(&self, keys: &[(String, String)]) -> StoreResult<Vec<TaskRecord>> {
        let queues: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
        let names: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
        sqlx::query_as::<_, TaskRow>(
            "SELECT t.* FROM tasks t JOIN unnest($1::text[], $2::text[]) AS k(queue, key) \
             ON t.queue = k.queue AND t.key = k.key",
        )
        .bind(&queues)
        .bind(&names)
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(TaskRow::into_record)
        .collect()
    }

    async fn task_queues(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, String>> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT id, queue FROM tasks WHERE id = ANY($1)")
                .bind(task_ids)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().collect())
    }

    async fn task_list(&self, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        // A creation-time range is read in creation order, from its index.
        let by_created = f.created_after.is_some() || f.created_before.is_some();
        let push_where = |qb: &mut sqlx::QueryBuilder<Postgres>| {
            if let Some(queue) = &f.queue {
                qb.push(" AND queue = ").push_bind(queue);
            }
            if let Some(key) = &f.key {
                qb.push(" AND key = ").push_bind(key);
            }
            if let Some(worker) = &f.worker_id {
                qb.push(" AND leased_by = ").push_bind(worker);
            }
            if let Some(error) = &f.last_error {
                qb.push(" AND last_error = ").push_bind(error);
            }
            if let Some(after) = f.created_after {
                qb.push(" AND created_at >= ").push_bind(ms(after));
            }
            if let Some(before) = f.created_before {
                qb.push(" AND created_at < ").push_bind(ms(before));
            }
            if let Some(schedule) = &f.schedule_id {
                qb.push(" AND schedule_id = ").push_bind(schedule);
            }
            match (f.before_created, f.before_seq) {
                (Some(at), Some(seq)) if by_created => {
                    qb.push(" AND (created_at, seq) < (")
                        .push_bind(ms(at))
                        .push(", ")
                        .push_bind(seq)
                        .push(")");
                }
                (_, Some(seq)) => {
                    qb.push(" AND seq < ").push_bind(seq);
                }
                _ => {}
            }
            if let Some(group) = &f.fanout_group {
                qb.push(" AND fanout_group = ").push_bind(group);
            }
            if let Some(sql) = state_filter_sql(&f.states, &ms(f.now).to_string()) {
                qb.push(" AND ").push(sql);
            }
        };
        if by_created {
            // tasks_created leaves LEASED rows out (0013: a lease writes no entry
            // into it); they are few, so they are read apart and merged in.
            let mut qb = sqlx::QueryBuilder::<Postgres>::new(
                "SELECT * FROM ((SELECT * FROM tasks WHERE state <> 'leased'",
            );
            push_where(&mut qb);
            qb.push(" ORDER BY created_at DESC, seq DESC LIMIT ")
                .push_bind(i64::from(f.limit))
                .push(") UNION ALL (SELECT * FROM tasks WHERE state = 'leased'");
            push_where(&mut qb);
            qb.push(" ORDER BY created_at DESC, seq DESC LIMIT ")
                .push_bind(i64::from(f.limit))
                .push(")) u ORDER BY created_at DESC, seq DESC LIMIT ")
                .push_bind(i64::from(f.limit));
            return qb
                .build_query_as::<TaskRow>()
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .map(TaskRow::into_record)
                .collect();
        }
        let mut qb = sqlx::QueryBuilder::<Postgres>::new("SELECT * FROM tasks WHERE 1 = 1");
        push_where(&mut qb);
        qb.push(" ORDER BY seq DESC LIMIT ")
            .push_bind(i64::from(f.limit));
        qb.build_query_as::<TaskRow>()
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(TaskRow::into_record)
            .collect()
    }

    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        let now = ms(now);
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            tx.rollback().await?;
            return Ok(Changed::NotFound);
        };
        let (sql, kind) = match row.stored_state()? {
            StoredState::Pending | StoredState::Blocked => (
                "UPDATE tasks SET state = 'cancelled', finished_at = $1, updated_at = $1 \
                 WHERE seq = $2",
                EventKind::Cancelled,
            ),
            StoredState::Leased => (
                "UPDATE tasks SET cancel_requested = TRUE, updated_at = $1 WHERE seq = $2",
                EventKind::Updated,
            ),
            StoredState::Cancelled => {
                tx.rollback().await?;
                return Ok(Changed::Done(Box::new(row.into_record()?)));
            }
            other => {
                tx.rollback().await?;
                return Ok(Changed::WrongState(other));
            }
        };
        sqlx::query(sql)
            .bind(now)
            .bind(row.seq)
            .execute(&mut *tx)
            .await?;
        let changed = Self::changed_event(&mut tx, task_id, kind, now).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn task_update(
        &self,
        task_id: &str,
        u: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            tx.rollback().await?;
            return Ok(Changed::NotFound);
        };
        let state = row.stored_state()?;
        if matches!(state, StoredState::Leased | StoredState::Succeeded) {
            tx.rollback().await?;
            return Ok(Changed::WrongState(state));
        }
        let max_attempts = u.max_attempts.map(i64::from).unwrap_or(row.max_attempts);
        sqlx::query(
            "UPDATE tasks SET run_at = $1, priority = $2, deadline = $3, max_attempts = $4, \
             attempts_allowed = $5, updated_at = $6 WHERE seq = $7",
        )
        .bind(u.run_at.map(ms).unwrap_or(row.run_at))
        .bind(u.priority.map(i64::from).unwrap_or(row.priority))
        .bind(u.deadline.map(|d| d.map(ms)).unwrap_or(row.deadline))
        .bind(max_attempts)
        .bind(row.attempts_allowed - row.max_attempts + max_attempts)
        .bind(ms(now))
        .bind(row.seq)
        .execute(&mut *tx)
        .await?;
        if state == StoredState::Pending {
            Self::notify(&mut tx, &[&row.queue]).await?;
        }
        // Routing: an admin change frees a reserved retry.
        routing::clear_reservation(&mut tx, &row).await?;
        let changed = Self::changed_event(&mut tx, task_id, EventKind::Updated, ms(now)).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            tx.rollback().await?;
            return Ok(Changed::NotFound);
        };
        let state = row.stored_state()?;
        if !matches!(state, StoredState::Dead | StoredState::Cancelled) {
            tx.rollback().await?;
            return Ok(Changed::WrongState(state));
        }
        sqlx::query(
            "UPDATE tasks SET state = 'pending', run_at = $1, attempts_allowed = attempt + max_attempts, \
             cancel_requested = FALSE, finished_at = NULL, updated_at = $1 WHERE seq = $2",
        )
        .bind(ms(now))
        .bind(row.seq)
        .execute(&mut *tx)
        .await?;
        Self::notify(&mut tx, &[&row.queue]).await?;
        // Routing: an admin requeue frees a reserved retry.
        routing::clear_reservation(&mut tx, &row).await?;
        let changed = Self::changed_event(&mut tx, task_id, EventKind::Requeued, ms(now)).await?;
        tx.commit().await?;
        Ok(changed)
    }

    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>> {
        let exists: Option<i64> = sqlx::query_scalar("SELECT seq FROM tasks WHERE id = $1")
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query_as::<_, AttemptRow>(
            "SELECT attempt, worker_id, worker_address, leased_at, finished_at, outcome, error, \
             fencing_token FROM task_attempts WHERE task_id = $1 \
             UNION ALL \
             SELECT attempt, COALESCE(leased_by, ''), COALESCE(leased_address, ''), \
               COALESCE(leased_at, updated_at), NULL, 'running', NULL, fencing_token \
             FROM tasks t WHERE id = $1 AND state = 'leased' AND NOT EXISTS ( \
               SELECT 1 FROM task_attempts a WHERE a.task_id = t.id AND a.attempt = t.attempt) \
             ORDER BY attempt",
        )
        .bind(task_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(AttemptRow::into_record)
            .collect::<StoreResult<Vec<_>>>()
            .map(Some)
    }

    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>> {
        let now = ms(now);
        let all = queues.is_empty();
        // Three index-only scans instead of one over the table: finished and blocked
        // rows through the (queue, state) index, leased rows through tasks_leased and
        // pending rows through the lease index (each predicate names its index's).
        let mut qb = sqlx::QueryBuilder::<Postgres>::new(
            "SELECT queue, state, FALSE, COUNT(*), 0::BIGINT FROM tasks \
             WHERE state NOT IN ('pending', 'leased')",
        );
        if !all {
            qb.push(" AND queue = ANY(").push_bind(queues).push(")");
        }
        qb.push(
            " GROUP BY queue, state UNION ALL SELECT queue, 'leased', FALSE, COUNT(*), 0::BIGINT \
             FROM tasks WHERE state = 'leased'",
        );
        if !all {
            qb.push(" AND queue = ANY(").push_bind(queues).push(")");
        }
        qb.push(" GROUP BY queue UNION ALL SELECT queue, state, run_at > ")
            .push_bind(now)
            .push(" AS later, COUNT(*), MIN(run_at) FROM tasks WHERE state = 'pending'");
        if !all {
            qb.push(" AND queue = ANY(").push_bind(queues).push(")");
        }
        qb.push(" GROUP BY queue, state, later");
        let counts: Vec<(String, String, bool, i64, i64)> =
            qb.build_query_as().fetch_all(&self.pool).await?;
        let recent: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT t.queue, a.outcome, COUNT(*) FROM task_attempts a \
             JOIN tasks t ON t.id = a.task_id WHERE a.finished_at >= $1 \
             AND ($2 OR t.queue = ANY($3)) GROUP BY t.queue, a.outcome",
        )
        .bind(now - 60_000)
        .bind(all)
        .bind(queues)
        .fetch_all(&self.pool)
        .await?;
        Ok(super::row::fold_stats(counts, recent))
    }

    async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64> {
        let (only, except): (Option<&str>, Vec<&str>) = match scope {
            PurgeScope::Only(q) => (Some(q), Vec::new()),
            PurgeScope::AllExcept(qs) => (None, qs.iter().map(String::as_str).collect()),
        };
        // Old finished tasks are found through tasks_queue_state (queue, state,
        // finished_at), the only index a settle writes besides the universal ones
        // (0013): its queues are walked one index probe each (qs), then each
        // (queue, finished state) is a range of it.
        let purged: i64 = sqlx::query_scalar(
            "WITH RECURSIVE qs(q) AS ( \
               SELECT CASE WHEN $2::text IS NULL THEN (SELECT queue FROM tasks \
                 WHERE state NOT IN ('pending', 'leased') ORDER BY queue LIMIT 1) ELSE $2 END \
               UNION ALL \
               SELECT (SELECT t.queue FROM tasks t WHERE t.state NOT IN ('pending', 'leased') \
                 AND t.queue > qs.q ORDER BY t.queue LIMIT 1) \
               FROM qs WHERE qs.q IS NOT NULL AND $2::text IS NULL), \
             old AS ( \
               SELECT o.seq FROM qs \
               CROSS JOIN unnest(ARRAY['succeeded', 'dead', 'cancelled']) AS s(state) \
               CROSS JOIN LATERAL (SELECT t.seq FROM tasks t WHERE t.queue = qs.q \
                 AND t.state = s.state AND t.state NOT IN ('pending', 'leased') \
                 AND t.finished_at < $1 LIMIT $4) o \
               WHERE qs.q IS NOT NULL AND NOT (qs.q = ANY($3)) LIMIT $4), \
             gone AS ( \
               DELETE FROM tasks WHERE seq IN ( \
                 SELECT seq FROM tasks WHERE seq IN (SELECT seq FROM old) \
                   AND state IN ('succeeded', 'dead', 'cancelled') AND finished_at < $1 \
                 FOR UPDATE SKIP LOCKED) \
               RETURNING id), \
             attempts AS (DELETE FROM task_attempts WHERE task_id IN (SELECT id FROM gone)) \
             SELECT COUNT(*) FROM gone",
        )
        .bind(ms(before))
        .bind(only)
        .bind(&except)
        .bind(i64::from(limit))
        .fetch_one(&self.pool)
        .await?;
        Ok(purged.max(0) as u64)
    }

    async fn schedule_insert(&self, s: &ScheduleRecord) -> StoreResult<bool> {
        schedule::insert(&self.pool, s).await
    }

    async fn schedule_get(&self, id: &str) -> StoreResult<Option<ScheduleRecord>> {
        schedule::get(&self.pool, id).await
    }

    async fn schedule_list(&self, f: &ScheduleFilter) -> StoreResult<Vec<ScheduleRecord>> {
        schedule::list(&self.pool, f).await
    }

    async fn schedule_update(&self, s: &ScheduleRecord, now: DateTime<Utc>) -> StoreResult<bool> {
        schedule::update(&self.pool, s, now).await
    }

    async fn schedule_delete(&self, id: &str) -> StoreResult<bool> {
        schedule::delete(&self.pool, id).await
    }

    async fn schedule_due(&self, now: DateTime<Utc>, limit: u32) -> StoreResult<Vec<DueSchedule>> {
        schedule::due(&self.pool, now, limit).await
    }

    async fn schedule_fire(&self, f: &ScheduleFire) -> StoreResult<Fired> {
        schedule::fire(&self.pool, f).await
    }

    async fn schedule_run_list(
        &self,
        f: &ScheduleRunFilter,
    ) -> StoreResult<Vec<ScheduleRunRecord>> {
        schedule::run_list(&self.pool, f).await
    }

    fn pool_stats(&self) -> PoolStats {
        let hot = self.hot.as_ref();
        PoolStats {
            size: self.pool.size() + hot.map_or(0, |p| p.size()),
            idle: self.pool.num_idle() + hot.map_or(0, |p| p.num_idle()),
        }
    }

    fn spawn_listener(&self, wake: Waker, stop: CancellationToken) {
        self.listen(wake, stop);
    }

    fn notification_stats(&self) -> NotificationStats {
        use std::sync::atomic::Ordering::Relaxed;
        NotificationStats {
            received: self.notes.received.load(Relaxed),
            own_skipped: self.notes.own_skipped.load(Relaxed),
        }
    }

    async fn close(&self) {
        if let Some(hot) = &self.hot {
            hot.close().await;
        }
        self.pool.close().await;
    }

    // ---- reads of the whole broker (the console) and bulk requeue ----

    async fn attempt_histogram(
        &self,
        p: &AttemptHistogramParams,
    ) -> StoreResult<Vec<AttemptBucket>> {
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT t.queue, (a.finished_at - $1) / $3 AS b, \
               COUNT(*) FILTER (WHERE a.outcome = 'succeeded'), \
               COUNT(*) FILTER (WHERE a.outcome <> 'succeeded') \
             FROM task_attempts a JOIN tasks t ON t.id = a.task_id \
             WHERE a.finished_at >= $1 AND a.finished_at < $2 \
             GROUP BY t.queue, b ORDER BY t.queue, b",
        )
        .bind(ms(p.since))
        .bind(ms(p.until))
        .bind(duration_ms(p.bucket).max(1))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(observe::bucket_row).collect())
    }

    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT t.queue, a.finished_at - a.leased_at FROM task_attempts a \
             JOIN tasks t ON t.id = a.task_id \
             WHERE a.finished_at >= $1 AND a.outcome = 'succeeded' \
             ORDER BY a.finished_at DESC LIMIT $2",
        )
        .bind(ms(p.since))
        .bind(i64::from(p.limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(queue, d)| AttemptDuration {
                queue,
                run_time: Duration::from_millis(d.max(0) as u64),
            })
            .collect())
    }

    async fn task_dead_groups(&self, p: &DeadGroupParams) -> StoreResult<Vec<DeadGroup>> {
        // Console (migration 0011): counted per (queue, error_hash) from
        // tasks_dead_error alone, then one row per group read for its text.
        let rows: Vec<(String, String, i64, Option<i64>)> = sqlx::query_as(
            "WITH g AS (SELECT queue, error_hash, COUNT(*) AS n, MAX(finished_at) AS last \
               FROM tasks WHERE state = 'dead' AND ($1::text IS NULL OR queue = $1) \
                 AND ($2::text IS NULL OR (error_hash = hashtextextended($2, 0) \
                   AND COALESCE(last_error, '') = $2)) \
               GROUP BY queue, error_hash ORDER BY n DESC, queue, error_hash LIMIT $3) \
             SELECT g.queue, COALESCE((SELECT t.last_error FROM tasks t WHERE t.state = 'dead' \
                 AND t.queue = g.queue AND t.error_hash = g.error_hash \
                 AND ($2::text IS NULL OR COALESCE(t.last_error, '') = $2) LIMIT 1), '') AS e, \
               g.n, g.last FROM g ORDER BY g.n DESC, g.queue, e",
        )
        .bind(p.queue.as_deref())
        .bind(p.error.as_deref())
        .bind(i64::from(p.limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(observe::dead_group_row).collect())
    }

    async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            // A CTE runs once (an IN subquery may be rescanned per row, past the limit).
            sqlx::AssertSqlSafe(format!(
                "WITH picked AS (SELECT seq FROM tasks WHERE queue = $2 AND state = 'dead' \
                   AND error_hash = hashtextextended($3, 0) \
                   AND COALESCE(last_error, '') = $3 ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED), \
                 u AS (UPDATE tasks t SET state = 'pending', run_at = $1, \
                   attempts_allowed = attempt + max_attempts, cancel_requested = FALSE, \
                   finished_at = NULL, updated_at = $1 \
                 FROM picked WHERE t.seq = picked.seq RETURNING t.id, t.queue, t.state, t.attempt, t.run_at) {}",
                // Flow: the REQUEUED events in the same statement.
                events::from_updated("requeued", "$1")
            )),
        )
        .bind(ms(p.now))
        .bind(&p.queue)
        .bind(&p.error)
        .bind(i64::from(p.limit))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n > 0 {
            Self::notify(&mut tx, &[&p.queue]).await?;
        }
        tx.commit().await?;
        Ok(n)
    }

    async fn lease_holders(&self, p: &LeaseHolderParams) -> StoreResult<Vec<LeaseHolder>> {
        let rows: Vec<observe::HolderRow> = sqlx::query_as(
            "SELECT COALESCE(leased_by, ''), COALESCE(leased_address, ''), queue, COUNT(*), \
               MIN(leased_at), MAX(updated_at) FROM tasks \
             WHERE state = 'leased' AND lease_expires_at >= 0 \
             GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 LIMIT $1",
        )
        .bind(i64::from(p.limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(observe::holder_row).collect())
    }

    async fn task_cancel_dead(&self, p: &CancelDeadParams) -> StoreResult<u64> {
        dead::task_cancel_dead(&self.pool, p).await
    }

    // ---- routing: the worker registry ----

    async fn worker_record_seen(&self, seen: &[WorkerSeen]) -> StoreResult<()> {
        routing::worker_record_seen(&self.pool, seen).await
    }

    async fn worker_list(&self, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>> {
        routing::worker_list(&self.pool, f).await
    }

    async fn worker_get(
        &self,
        worker_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>> {
        routing::worker_get(&self.pool, worker_id, now).await
    }

    // ---- Flow: dependencies, events, bulk operations (postgres/flow.rs) ----

    async fn task_insert_flow(
        &self,
        tasks: &[NewTask],
        flows: &[FlowSpec],
        now: DateTime<Utc>,
    ) -> StoreResult<FlowInserted> {
        flow::insert(&self.pool, tasks, flows, now).await
    }

    async fn task_flow_info(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, TaskFlowInfo>> {
        flow::flow_info(&self.pool, task_ids).await
    }

    async fn event_list(
        &self,
        task_id: &str,
        after_event_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        flow::event_list(&self.pool, task_id, after_event_id, limit).await
    }

    async fn event_read(&self, after_event_id: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
        flow::event_read(&self.pool, after_event_id, limit).await
    }

    async fn event_head(&self) -> StoreResult<i64> {
        flow::event_head(&self.pool).await
    }

    async fn event_purge(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
        flow::event_purge(&self.pool, before, limit).await
    }

    async fn queue_dead_letters_set(&self, pairs: &[(String, String)]) -> StoreResult<()> {
        flow::dead_letters_set(&self.pool, pairs).await
    }

    async fn task_select(&self, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
        flow::select(&self.pool, f).await
    }

    async fn task_cancel_many(
        &self,
        task_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<BulkCancelled> {
        flow::cancel_many(&self.pool, task_ids, now).await
    }

    async fn task_requeue_many(
        &self,
        tasks: &[(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        flow::requeue_many(&self.pool, tasks, now).await
    }

    async fn task_deps_unfinished(&self, task_id: &str, limit: u32) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT depends_on FROM task_deps WHERE task_id = $1 AND NOT resolved \
             ORDER BY depends_on LIMIT $2",
        )
        .bind(task_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    // Admission: postgres/admission.rs.
    async fn queue_list(&self) -> StoreResult<Vec<StoredQueue>> {
        self.admission_queue_list().await
    }

    async fn queue_seed(
        &self,
        seed: &[(String, crate::domain::admission::QueueConfig)],
    ) -> StoreResult<()> {
        self.admission_queue_seed(seed).await
    }

    async fn queue_put(
        &self,
        name: &str,
        config: &crate::domain::admission::QueueConfig,
        version: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        self.admission_queue_put(name, config, version, now).await
    }

    async fn task_lease_gated(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        self.admission_lease(ps).await
    }

    async fn queue_usage(
        &self,
        queue: &str,
        key: Option<&str>,
        now: DateTime<Utc>,
    ) -> StoreResult<QueueUsage> {
        self.admission_usage(queue, key, now).await
    }

    async fn task_ahead(
        &self,
        task: &TaskRecord,
        aging_ms: Option<i64>,
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        self.admission_ahead(task, aging_ms, now).await
    }

    // Sync match.

    async fn task_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>> {
        self.sync_insert_matched(tasks, matches, now).await
    }

    async fn lease_release(&self, leases: &[LeaseRef], now: DateTime<Utc>) -> StoreResult<u64> {
        self.sync_lease_release(leases, now).await
    }

    async fn queue_key_tokens_purge(&self, now: DateTime<Utc>) -> StoreResult<u64> {
        self.admission_key_tokens_purge(now).await
    }
}

#[cfg(test)]
mod wake_tag_tests {
    use super::wake_for;

    #[test]
    fn own_wake_ups_are_skipped_and_others_wake_their_queue() {
        let own = "@00000000000000aa";
        assert_eq!(wake_for("emails@00000000000000aa", own), None);
        assert_eq!(wake_for("emails@00000000000000bb", own), Some("emails"));
        // Untagged: an older replica, or a path whose broker does not wake locally.
        assert_eq!(
            wake_for("emails.v2:high-prio_1", own),
            Some("emails.v2:high-prio_1")
        );
        // A tag that merely starts like ours is another replica's.
        assert_eq!(wake_for("q@00000000000000aa1", own), Some("q"));
    }
}
