//! Completing leases: the checked path (lock, check the lease, settle) one at a
//! time and in batches.

use super::*;

impl PostgresStore {
    /// Answers the completions that the one-statement path did not settle, in one
    /// read: unknown task, a repeated Complete of a settled lease, or a lost lease.
    /// A lease that is live by now (it cannot be, short of a clock step between the
    /// two statements) is settled on its own.
    pub(super) async fn complete_checked_many(
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
            "SELECT t.id, t.queue, t.state, t.lease_token, t.lease_expires_at, \
                 CASE WHEN t.state = 'succeeded' THEN 'succeeded' ELSE a.outcome END \
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
    pub(super) async fn complete_checked(
        &self,
        p: &CompleteParams,
    ) -> StoreResult<Settled<Completed>> {
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
             lease_expires_at = NULL, updated_at = $2 WHERE id = $3",
        )
        .bind(&p.result)
        .bind(now)
        .bind(&row.id)
        .execute(&mut *tx)
        .await?;
        let mut ev = flow_of_row(&row, EventKind::Succeeded, now);
        ev.state = "succeeded";
        events::record(&mut tx, &[ev]).await?;
        // The succeeded attempt stays on the task row (migration 0018).
        let leased_at = Some(from_ms(row.attempt_end().leased_at));
        tx.commit().await?;
        Ok(Settled::Applied(Completed {
            queue: row.queue,
            leased_at,
        }))
    }

    pub(super) async fn task_complete(
        &self,
        p: &CompleteParams,
    ) -> StoreResult<Settled<Completed>> {
        let mut settled = self.task_complete_many(std::slice::from_ref(p)).await?;
        settled
            .pop()
            .ok_or_else(|| StoreError::Corrupt("no completion outcome".into()))
    }

    pub(super) async fn task_complete_many(
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
                 COALESCE(tasks.leased_at, tasks.updated_at) AS leased_at), \
             ev AS (",
            events::event_batch!(),
            "SELECT id, queue, 'succeeded', 'succeeded', attempt, leased_by, now, NULL::text \
               FROM t",
            events::event_batch_end!(),
            ") \
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
}
