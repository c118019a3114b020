//! Reads: one task, tasks by key, lists, attempts, queue stats, the next run time.

use super::*;

/// CTEs naming the attempts that finished at or after `since` (an SQL expression
/// in ms): `recent(queue, worker_id, leased_at, finished_at, outcome)`. An attempt
/// that ended otherwise than in success has its row in task_attempts; a succeeded
/// one is its task's row (migration 0018), found per queue through
/// tasks_queue_state (queue, state, finished_at) after a walk of its queues (one
/// probe each), unless task_attempts holds it (a success recorded before 0018).
/// Starts with `WITH RECURSIVE`; append more CTEs with a comma.
pub(super) fn recent_attempts(since: &str) -> String {
    format!(
        "WITH RECURSIVE done_queues(q) AS ( \
           SELECT (SELECT queue FROM tasks WHERE state NOT IN ('pending', 'leased') \
             ORDER BY queue LIMIT 1) \
           UNION ALL \
           SELECT (SELECT t.queue FROM tasks t WHERE t.state NOT IN ('pending', 'leased') \
             AND t.queue > dq.q ORDER BY t.queue LIMIT 1) \
           FROM done_queues dq WHERE dq.q IS NOT NULL), \
         recent(queue, worker_id, leased_at, finished_at, outcome) AS ( \
           SELECT t.queue, a.worker_id, a.leased_at, a.finished_at, a.outcome \
           FROM task_attempts a JOIN tasks t ON t.id = a.task_id WHERE a.finished_at >= {since} \
           UNION ALL \
           SELECT s.queue, s.worker_id, s.leased_at, s.finished_at, 'succeeded' \
           FROM done_queues dq CROSS JOIN LATERAL ( \
             SELECT t.queue, COALESCE(t.leased_by, '') AS worker_id, \
               COALESCE(t.leased_at, t.updated_at) AS leased_at, t.finished_at \
             FROM tasks t WHERE t.queue = dq.q AND t.state = 'succeeded' \
               AND t.state NOT IN ('pending', 'leased') AND t.finished_at >= {since} \
               AND NOT EXISTS (SELECT 1 FROM task_attempts x \
                 WHERE x.task_id = t.id AND x.attempt = t.attempt)) s \
           WHERE dq.q IS NOT NULL)"
    )
}

impl PostgresStore {
    pub(super) async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let next: Option<i64> = sqlx::query_scalar(
            "SELECT MIN(n) FROM UNNEST($1::text[]) AS q(name), LATERAL ( \
               SELECT run_at AS n FROM tasks WHERE state = 'pending' AND waiting \
               AND queue = q.name AND run_at > $2 ORDER BY run_at LIMIT 1) f",
        )
        .bind(queues)
        .bind(ms(now))
        .fetch_one(self.hot())
        .await?;
        Ok(next.map(from_ms))
    }

    pub(super) async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>> {
        sqlx::query_as::<_, TaskRow>("SELECT * FROM tasks WHERE id = $1")
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?
            .map(TaskRow::into_record)
            .transpose()
    }

    pub(super) async fn task_find_keys(
        &self,
        keys: &[(String, String)],
    ) -> StoreResult<Vec<TaskRecord>> {
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


    pub(super) async fn task_queues(
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

    pub(super) async fn task_list(&self, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        // Every list is read in creation order, from its index (tasks have no
        // index on `seq` alone: each row version would write an entry to it).
        // A page token of an earlier version carries only a sequence number.
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
                (Some(at), Some(seq)) => {
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
        qb.build_query_as::<TaskRow>()
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(TaskRow::into_record)
            .collect()
    }

    pub(super) async fn attempt_list(
        &self,
        task_id: &str,
    ) -> StoreResult<Option<Vec<AttemptRecord>>> {
        let exists: Option<i64> = sqlx::query_scalar("SELECT seq FROM tasks WHERE id = $1")
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query_as::<_, AttemptRow>(
            "SELECT attempt, worker_id, worker_address, leased_at, finished_at, outcome, error, \
             fencing_token FROM task_attempts_all WHERE task_id = $1 \
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

    pub(super) async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>> {
        let now = ms(now);
        let all = queues.is_empty();
        // Index-only scans instead of one over the table: finished and blocked
        // rows through the (queue, state) index, leased rows through tasks_leased and
        // pending rows through the lease index and tasks_waiting (each predicate names its index's).
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
        // Pending rows in two parts, each through its index: the lease index
        // (not waiting) and tasks_waiting.
        qb.push(" GROUP BY queue");
        for part in ["NOT waiting", "waiting"] {
            qb.push(" UNION ALL SELECT queue, state, run_at > ")
                .push_bind(now)
                .push(" AS later, COUNT(*), MIN(run_at) FROM tasks WHERE state = 'pending' AND ")
                .push(part);
            if !all {
                qb.push(" AND queue = ANY(").push_bind(queues).push(")");
            }
            qb.push(" GROUP BY queue, state, later");
        }
        let counts: Vec<(String, String, bool, i64, i64)> =
            qb.build_query_as().fetch_all(&self.pool).await?;
        let recent: Vec<(String, String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{} SELECT queue, outcome, COUNT(*) FROM recent \
             WHERE ($2 OR queue = ANY($3)) GROUP BY queue, outcome",
            recent_attempts("$1::bigint")
        )))
        .bind(now - 60_000)
        .bind(all)
        .bind(queues)
        .fetch_all(&self.pool)
        .await?;
        Ok(super::row::fold_stats(counts, recent))
    }
}
