//! Sync match on Postgres: one statement inserts a batch, the matched
//! tasks already leased, after checking in the same statement (the same snapshot)
//! that no pending task of their queue due now would lease before them.
//!
//! Why a snapshot check is enough against other replicas: a task that another
//! transaction makes pending and commits after this statement's snapshot was
//! not acknowledged to its producer (nor made due) before this statement began,
//! so the two are concurrent and either order is one the producers could have
//! seen. A task leased here is inserted leased: no lease statement anywhere can
//! take it, so exclusivity needs no lock (the row is new and unique by id).

use chrono::{DateTime, Utc};

use super::super::row::{duration_ms, ms};
use super::super::sync_match::{leased_row, matches_in_lease_order, metadata_json};
use super::super::*;
use super::{CHANNEL, PostgresStore};

/// id, seq, state, lease token, lease expiry of each inserted row.
type InsertedRow = (String, i64, String, Option<String>, Option<i64>);

// `top` and `v` are MATERIALIZED: inlined, the planner copied `v.m` (with its
// NOT EXISTS over `top`, itself a scan of `u` per row) into each of the nine
// CASE expressions that read it, which made the statement quadratic in the batch:
// 0.7 s for 500 rows and 2.6-4.9 s for 1,400-1,650 (auto_explain), the cause of
// the slow batched runs and p99 pick-ups of seconds with sync match on.
const INSERT_MATCHED: &str = concat!(
    "WITH u AS ( \
       SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::float8[], \
         $11::bigint[], $12::float8[], $13::text[], $16::text[], $17::text[], $18::text[], \
         $19::text[], $20::bigint[], $21::text[], $22::bool[], $23::text[], $24::text[], \
         $25::bigint[]) WITH ORDINALITY \
         AS u(id, queue, key, payload, priority, run_at, deadline, max_attempts, \
              ib, bm, mb, j, md, ck, tw, tl, st, sto, fg, fd, worker, address, dur, n)), \
     top AS MATERIALIZED ( \
       SELECT q.queue, GREATEST((SELECT t.priority FROM tasks t WHERE t.state = 'pending' \
           AND NOT t.waiting AND t.queue = q.queue AND t.run_at <= $14 \
           AND COALESCE(t.deadline, 9223372036854775807) > $14 \
         ORDER BY t.priority DESC LIMIT 1), \
         (SELECT max(t.priority) FROM tasks t WHERE t.state = 'pending' AND t.waiting \
           AND t.queue = q.queue AND t.run_at <= $14 \
           AND COALESCE(t.deadline, 9223372036854775807) > $14)) AS p \
       FROM (SELECT DISTINCT queue FROM u WHERE worker IS NOT NULL) q), \
     v AS MATERIALIZED ( \
       SELECT u.*, (u.worker IS NOT NULL AND NOT EXISTS (SELECT 1 FROM top \
         WHERE top.queue = u.queue AND top.p >= u.priority)) AS m FROM u), \
     ins AS ( \
       INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, \
         max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
         max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key, \
         target_worker, target_labels, sticky, sticky_timeout_ms, fanout_group, fanout_distinct, \
         attempt, fencing_token, lease_token, leased_by, lease_duration_ms, lease_expires_at, \
         leased_at, leased_address, waiting) \
       SELECT id, queue, key, payload, priority, run_at, deadline, \
         CASE WHEN m THEN 'leased' ELSE 'pending' END, \
         max_attempts, max_attempts, ib, bm, mb, j, md, $14, $14, ck, tw, tl, st, sto, fg, fd, \
         CASE WHEN m THEN 1 ELSE 0 END, CASE WHEN m THEN 1 ELSE 0 END, \
         CASE WHEN m THEN gen_random_uuid()::text END, CASE WHEN m THEN worker END, \
         CASE WHEN m THEN dur END, \
         CASE WHEN m THEN LEAST($14 + dur, COALESCE(deadline, $14 + dur)) END, \
         CASE WHEN m THEN $14 END, CASE WHEN m THEN address END, NOT m AND run_at > $14 \
       FROM v ORDER BY n \
       ON CONFLICT DO NOTHING \
       RETURNING id, seq, state, lease_token, lease_expires_at, queue, run_at, leased_by), \
     ev AS (",
    super::events::event_batch!(),
    "SELECT e.id, e.queue, e.kind, e.st, e.att, e.w, $14::bigint, NULL::text FROM ( \
         SELECT seq, id, queue, 0 AS k, 'submitted'::text AS kind, \
           CASE WHEN run_at > $14 THEN 'scheduled' ELSE 'ready' END AS st, 0::bigint AS att, \
           NULL::text AS w FROM ins \
         UNION ALL SELECT seq, id, queue, 1, 'leased', 'leased', 1, leased_by FROM ins \
           WHERE state = 'leased') e ORDER BY e.seq, e.k",
    super::events::event_batch_end!(),
    "), \
     woken AS (SELECT pg_notify($15, q) FROM \
       (SELECT DISTINCT queue AS q FROM ins WHERE state = 'pending') d) \
     SELECT id, seq, state, lease_token, lease_expires_at FROM ins \
     WHERE (SELECT count(*) FROM woken) >= 0"
);

/// [`INSERT_MATCHED`] for a batch in which no task carries a key.
static INSERT_MATCHED_KEYLESS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| super::ops::keyless(INSERT_MATCHED));

impl PostgresStore {
    pub(super) async fn sync_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>> {
        let stands = matches_in_lease_order(tasks, matches, now);
        let matched = |i: usize| {
            matches
                .get(i)
                .and_then(Option::as_ref)
                .filter(|_| stands[i])
        };
        let col = |f: &dyn Fn(&NewTask) -> i64| tasks.iter().map(f).collect::<Vec<i64>>();
        let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        let queues: Vec<&str> = tasks.iter().map(|t| t.queue.as_str()).collect();
        let keys: Vec<Option<&str>> = tasks.iter().map(|t| t.key.as_deref()).collect();
        let payloads: Vec<&[u8]> = tasks.iter().map(|t| t.payload.as_slice()).collect();
        let deadlines: Vec<Option<i64>> = tasks.iter().map(|t| t.deadline.map(ms)).collect();
        let multipliers: Vec<f64> = tasks.iter().map(|t| t.retry.backoff_multiplier).collect();
        let jitters: Vec<f64> = tasks.iter().map(|t| t.retry.jitter).collect();
        let metadata: Vec<String> = tasks.iter().map(metadata_json).collect();
        let concurrency_keys: Vec<Option<&str>> =
            tasks.iter().map(|t| t.concurrency_key.as_deref()).collect();
        fn r(t: &NewTask) -> &crate::domain::routing::TaskRouting {
            &t.routing
        }
        let target_workers: Vec<Option<&str>> = tasks
            .iter()
            .map(|t| r(t).target.worker_id.as_deref())
            .collect();
        let target_labels: Vec<Option<String>> = tasks
            .iter()
            .map(|t| {
                let l = &r(t).target.labels;
                (!l.is_empty()).then(|| serde_json::to_string(l).unwrap_or_else(|_| "{}".into()))
            })
            .collect();
        let sticky: Vec<Option<&str>> = tasks
            .iter()
            .map(|t| r(t).sticky.map(|s| s.as_str()))
            .collect();
        let sticky_timeouts: Vec<Option<i64>> = tasks
            .iter()
            .map(|t| r(t).sticky.and_then(|s| s.timeout_ms()))
            .collect();
        let groups: Vec<Option<&str>> =
            tasks.iter().map(|t| r(t).fanout_group.as_deref()).collect();
        let distinct: Vec<bool> = tasks.iter().map(|t| r(t).fanout_distinct).collect();
        let workers: Vec<Option<&str>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| m.worker_id.as_str()))
            .collect();
        let addresses: Vec<Option<&str>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| m.worker_address.as_str()))
            .collect();
        let durations: Vec<Option<i64>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| duration_ms(m.lease_duration)))
            .collect();
        let sql = super::ops::by_keys(tasks, INSERT_MATCHED, &INSERT_MATCHED_KEYLESS);
        let rows: Vec<InsertedRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
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
            .bind(CHANNEL)
            .bind(&concurrency_keys)
            .bind(&target_workers)
            .bind(&target_labels)
            .bind(&sticky)
            .bind(&sticky_timeouts)
            .bind(&groups)
            .bind(&distinct)
            .bind(&workers)
            .bind(&addresses)
            .bind(&durations)
            .fetch_all(self.hot())
            .await?;
        let mut rows: std::collections::HashMap<String, InsertedRow> =
            rows.into_iter().map(|r| (r.0.clone(), r)).collect();
        // The rest were duplicates of a (queue, key): answer with the existing ids.
        let dups: Vec<&NewTask> = tasks.iter().filter(|t| !rows.contains_key(&t.id)).collect();
        let existing = self.sync_existing_ids(&dups).await?;
        let mut out = Vec::with_capacity(tasks.len());
        for (i, t) in tasks.iter().enumerate() {
            let Some((id, seq, state, token, expires)) = rows.remove(&t.id) else {
                let key = (t.queue.clone(), t.key.clone().unwrap_or_default());
                let task_id = existing
                    .get(&key)
                    .cloned()
                    .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
                out.push(MatchedInsert {
                    inserted: Inserted {
                        task_id,
                        deduplicated: true,
                    },
                    leased: None,
                });
                continue;
            };
            let leased = match (state.as_str(), matched(i), token, expires) {
                ("leased", Some(m), Some(token), Some(expires)) => {
                    Some(leased_row(t, m, seq, token, expires, now)?)
                }
                ("pending", ..) => None,
                _ => return Err(StoreError::Corrupt(format!("task {id} inserted {state}"))),
            };
            out.push(MatchedInsert {
                inserted: Inserted {
                    task_id: id,
                    deduplicated: false,
                },
                leased,
            });
        }
        Ok(out)
    }

    /// The ids of the tasks that hold the keys of `dups`, by (queue, key).
    async fn sync_existing_ids(
        &self,
        dups: &[&NewTask],
    ) -> StoreResult<std::collections::HashMap<(String, String), String>> {
        if dups.is_empty() {
            return Ok(Default::default());
        }
        let q: Vec<&str> = dups.iter().map(|t| t.queue.as_str()).collect();
        let k: Vec<Option<&str>> = dups.iter().map(|t| t.key.as_deref()).collect();
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT t.queue, t.key, t.id FROM tasks t \
             JOIN UNNEST($1::text[], $2::text[]) AS u(queue, key) \
               ON t.queue = u.queue AND t.key = u.key",
        )
        .bind(&q)
        .bind(&k)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(q, k, id)| ((q, k), id)).collect())
    }

}
