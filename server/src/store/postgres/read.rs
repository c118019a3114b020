//! Reads: one task, tasks by key, lists, attempts, queue stats, the next run time.

use super::*;

impl PostgresStore {

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

}
