//! The write operations of the hot path (submit, heartbeat, checkpoint, fail) and
//! the row-locking steps they share: fetch, check, finish the attempt, write the
//! failure, record the change, notify.

use super::*;

/// The task insert (see `PostgresStore::insert_on`): one multi-row statement that also
/// records the `submitted` events and notifies the queues that got tasks.
pub(super) const INSERT_PLAIN: &str = concat!(
    "WITH ins AS ( \
       INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, \
         max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
         max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key, waiting) \
       SELECT id, queue, key, payload, priority, run_at, deadline, 'pending', \
         max_attempts, max_attempts, ib, bm, mb, j, md, $14, $14, ck, run_at > $14 \
       FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::float8[], \
         $11::bigint[], $12::float8[], $13::text[], $16::text[]) \
         AS u(id, queue, key, payload, priority, run_at, deadline, max_attempts, \
              ib, bm, mb, j, md, ck) \
       ON CONFLICT DO NOTHING RETURNING id, queue, run_at), \
     ev AS (",
    events::event_batch!(),
    "SELECT id, queue, 'submitted', \
       CASE WHEN run_at > $14 THEN 'scheduled' ELSE 'ready' END, 0, NULL::text, $14, NULL::text \
       FROM ins",
    events::event_batch_end!(),
    "), \
     woken AS (SELECT pg_notify('taskbroker', q || $15) \
       FROM (SELECT DISTINCT queue AS q FROM ins) d) \
     SELECT id FROM ins WHERE (SELECT count(*) FROM woken) >= 0"
);

/// [`INSERT_PLAIN`] for a batch in which no task carries a key.
pub(super) static INSERT_PLAIN_KEYLESS: std::sync::LazyLock<String> =
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

impl PostgresStore {

    pub(super) async fn check(
        tx: &mut Transaction<'_, Postgres>,
        row: &TaskRow,
        report: Report,
        token: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<SettleCheck> {
        let state = row.stored_state()?;
        let outcome = if state == StoredState::Leased {
            None
        } else if state == StoredState::Succeeded {
            // Its last attempt succeeded; the task row carries it (migration 0018).
            Some(AttemptOutcome::Succeeded)
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
    pub(super) async fn finish_attempt(
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

    pub(super) async fn write_failure(
        tx: &mut Transaction<'_, Postgres>,
        row: &TaskRow,
        write: &FailureWrite,
        error: &str,
        outcome: AttemptOutcome,
        now: i64,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        sqlx::query(
            "UPDATE tasks SET state = $1, run_at = $2, waiting = $2 > $5, finished_at = $3, \
             last_error = $4, lease_expires_at = NULL, updated_at = $5 WHERE id = $6",
        )
        .bind(write.state.as_str())
        .bind(write.run_at)
        .bind(write.finished_at)
        .bind(error)
        .bind(now)
        .bind(&row.id)
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

    pub(super) async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>> {
        let mut conn = self.hot().acquire().await?;
        // The broker wakes its own waiters after the commit.
        Self::insert_on(&mut conn, tasks, now, &self.wake_tag).await
    }


    pub(super) async fn task_checkpoint(
        &self,
        p: &CheckpointParams,
    ) -> StoreResult<Settled<LeaseState>> {
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
               updated_at = $3 WHERE id = $4 RETURNING lease_expires_at, cancel_requested",
        )
        .bind(&p.checkpoint)
        .bind(p.extend_by.map(duration_ms))
        .bind(now)
        .bind(&row.id)
        .fetch_one(&mut *tx)
        .await?;
        events::record(&mut tx, &[flow_of_row(&row, EventKind::Checkpointed, now)]).await?;
        tx.commit().await?;
        Ok(Settled::Applied(LeaseState::Live {
            lease_expires_at: from_ms(at),
            cancel_requested,
        }))
    }

    pub(super) async fn task_fail(&self, p: &FailParams) -> StoreResult<Settled<FailResult>> {
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
}
