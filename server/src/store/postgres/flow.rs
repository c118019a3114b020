//! Flow on Postgres: inserts with dependencies, the event log, bulk
//! operations. Every statement that makes a transition records its event
//! (store/postgres/events.rs). Resolving dependents and dead-letter notices
//! happen in the row triggers of migration 0010, whose WHEN clauses let only a
//! task with dependents (`has_dependents`) or a task going DEAD through, in the
//! transaction of whatever statement changed the task.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres};

use super::super::flow::{may_depend, schedule_json};
use super::super::row::{TaskRow, ms, state_filter_sql};
use super::super::*;
use super::{CHANNEL, PostgresStore, sql};

fn finished(state: &str) -> bool {
    matches!(state, "succeeded" | "dead" | "cancelled")
}

/// The stored state of a new task and its flow columns.
struct Placed {
    id: String,
    state: &'static str,
    remaining: i64,
    run_if: bool,
    schedule: Option<String>,
}

pub(super) async fn insert(
    pool: &PgPool,
    tasks: &[NewTask],
    flows: &[FlowSpec],
    now: DateTime<Utc>,
    commit_by: Option<std::time::Instant>,
) -> StoreResult<FlowInserted> {
    let mut tx = pool.begin().await?;
    let keyed = flows.iter().any(|f| !f.depends_on_keys.is_empty());
    if keyed {
        // Before anything else (so no keyed insert of this batch holds the
        // shared form first): see the trigger of migration 0020.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('taskbroker.key_deps', 0))")
            .execute(&mut *tx)
            .await?;
    }
    let inserted = PostgresStore::insert_on(&mut tx, tasks, now, "").await?;
    let holders = if keyed {
        super::key_waits::key_holders(&mut tx, flows).await?
    } else {
        HashMap::new()
    };
    // A key held by a task the dependent's producer may not name is, for that
    // dependent, a key no task holds.
    let holder = |f: &FlowSpec, k: &TaskKey| -> Option<String> {
        holders
            .get(k)
            .filter(|(_, p)| may_depend(f.producer.as_deref(), p.as_deref()))
            .map(|(id, _)| id.clone())
    };
    // Each new task's dependencies, as ids (keys that name a task included).
    let deps: Vec<Vec<String>> = flows
        .iter()
        .map(|f| {
            let mut d = f.depends_on.clone();
            d.extend(
                f.depends_on_index
                    .iter()
                    .filter_map(|&j| inserted.get(j).map(|r| r.task_id.clone())),
            );
            d.extend(f.depends_on_keys.iter().filter_map(|k| holder(f, k)));
            d
        })
        .collect();
    // (dependency, producer its dependent may name: '' for any).
    let mut wanted: Vec<(&str, &str)> = flows
        .iter()
        .zip(&deps)
        .flat_map(|(f, d)| {
            let p = f.producer.as_deref().unwrap_or("");
            d.iter().map(move |id| (id.as_str(), p))
        })
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let (wanted_ids, wanted_by): (Vec<&str>, Vec<&str>) = wanted.into_iter().unzip();
    // Locked (in id order) and marked so none can finish until this transaction
    // ends, and each that finishes later runs the dependents trigger and sees
    // the edges written here; another producer's task is neither.
    let found: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "UPDATE tasks t SET has_dependents = TRUE FROM ( \
           SELECT id FROM tasks x WHERE id = ANY($1) AND EXISTS ( \
             SELECT 1 FROM UNNEST($1::text[], $2::text[]) AS w(id, p) WHERE w.id = x.id \
               AND (w.p = '' OR w.p = x.metadata::jsonb ->> 'taskbroker.producer')) \
           ORDER BY id FOR UPDATE) l \
         WHERE t.id = l.id RETURNING t.id, t.state, t.metadata::jsonb ->> 'taskbroker.producer'",
    )
    .bind(&wanted_ids)
    .bind(&wanted_by)
    .fetch_all(&mut *tx)
    .await?;
    let owners: HashMap<&str, Option<&str>> = found
        .iter()
        .map(|(id, _, p)| (id.as_str(), p.as_deref()))
        .collect();
    for (i, f) in flows.iter().enumerate() {
        let named = |d: &String| {
            owners
                .get(d.as_str())
                .is_some_and(|&p| may_depend(f.producer.as_deref(), p))
        };
        if let Some(j) = f.depends_on.iter().position(|d| !named(d)) {
            tx.rollback().await?;
            return Ok(FlowInserted::UnknownDependency { task: i, dep: j });
        }
    }
    let states: HashMap<&str, &str> = found
        .iter()
        .map(|(id, st, _)| (id.as_str(), st.as_str()))
        .collect();
    // Waits past the cap refuse the call.
    let mut new_waits = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        if inserted.get(i).is_none_or(|r| r.deduplicated) || f.is_plain() {
            continue;
        }
        for (j, k) in f.depends_on_keys.iter().enumerate() {
            if holder(f, k).is_none() {
                new_waits.push((i, j, k, f.producer.as_deref()));
            }
        }
    }
    if !new_waits.is_empty()
        && let Some((task, key)) = super::key_waits::over_wait_cap(&mut tx, &new_waits).await?
    {
        tx.rollback().await?;
        return Ok(FlowInserted::TooManyWaits { task, key });
    }
    let mut placed = Vec::new();
    let mut edges: (Vec<String>, Vec<String>, Vec<bool>) = Default::default();
    #[allow(clippy::type_complexity)]
    let mut waits: (
        Vec<String>,
        Vec<String>,
        Vec<String>,
        Vec<Option<String>>,
        Vec<Option<String>>,
    ) = Default::default();
    for (i, f) in flows.iter().enumerate() {
        let Some(r) = inserted.get(i).filter(|r| !r.deduplicated) else {
            continue;
        };
        if f.is_plain() {
            continue;
        }
        let mut mine: Vec<&String> = deps[i].iter().collect();
        mine.sort_unstable();
        mine.dedup();
        let mut remaining = 0;
        for k in &f.depends_on_keys {
            let holder = holder(f, k);
            // A key no task holds yet: a wait the insert of its task binds.
            remaining += i64::from(holder.is_none());
            waits.0.push(r.task_id.clone());
            waits.1.push(k.queue.clone());
            waits.2.push(k.key.clone());
            waits.3.push(holder);
            waits.4.push(f.producer.clone());
        }
        let mut failed = false;
        for d in mine {
            let state = states.get(d.as_str()).copied().unwrap_or("pending");
            let done = finished(state);
            remaining += i64::from(!done);
            failed |= matches!(state, "dead" | "cancelled");
            edges.0.push(d.clone());
            edges.1.push(r.task_id.clone());
            edges.2.push(done);
        }
        let state = if failed && !f.run_if_dependency_fails {
            "cancelled"
        } else if remaining > 0 {
            "blocked"
        } else {
            "pending"
        };
        placed.push(Placed {
            id: r.task_id.clone(),
            state,
            remaining,
            run_if: f.run_if_dependency_fails,
            schedule: schedule_json(&f.retry_schedule),
        });
    }
    // Edges first: a dependency in this batch that is cancelled below then
    // cancels its dependents through the trigger, like any other.
    sqlx::query(
        "INSERT INTO task_deps (depends_on, task_id, resolved) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bool[]) ON CONFLICT DO NOTHING",
    )
    .bind(&edges.0)
    .bind(&edges.1)
    .bind(&edges.2)
    .execute(&mut *tx)
    .await?;
    if !waits.0.is_empty() {
        sqlx::query(
            "INSERT INTO task_key_deps (task_id, queue, key, bound_to, producer) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&waits.0)
        .bind(&waits.1)
        .bind(&waits.2)
        .bind(&waits.3)
        .bind(&waits.4)
        .execute(&mut *tx)
        .await?;
    }
    let ids: Vec<&str> = placed.iter().map(|p| p.id.as_str()).collect();
    let st: Vec<&str> = placed.iter().map(|p| p.state).collect();
    let rem: Vec<i64> = placed.iter().map(|p| p.remaining).collect();
    let run_if: Vec<bool> = placed.iter().map(|p| p.run_if).collect();
    let sched: Vec<Option<&str>> = placed.iter().map(|p| p.schedule.as_deref()).collect();
    // A blocked task was submitted BLOCKED: its SUBMITTED event says so; one
    // whose dependency failed already is CANCELLED at once (an event too), in
    // the same statement, before the dependents trigger tells its own dependents.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH c AS (UPDATE tasks t SET state = u.state, deps_remaining = u.rem, \
           run_if_dependency_fails = u.run_if, retry_schedule = u.sched, \
           cancel_reason = CASE WHEN u.state = 'cancelled' THEN 'dependency_failed' END, \
           last_error = CASE WHEN u.state = 'cancelled' THEN 'DEPENDENCY_FAILED' ELSE t.last_error END, \
           finished_at = CASE WHEN u.state = 'cancelled' THEN $6 ELSE t.finished_at END \
         FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bool[], $5::text[]) \
           AS u(id, state, rem, run_if, sched) WHERE t.id = u.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at), \
         blocked AS (SELECT array_agg(id) AS ids FROM c WHERE state = 'blocked'), \
         b AS (UPDATE task_event_batches e SET states = ( \
             SELECT array_agg(CASE WHEN x.k = 'submitted' AND x.t = ANY(blocked.ids) \
               THEN 'blocked' ELSE x.s END ORDER BY x.o) \
             FROM unnest(e.task_ids, e.kinds, e.states) WITH ORDINALITY AS x(t, k, s, o)) \
           FROM blocked WHERE e.task_ids && blocked.ids \
             AND e.last_id >= pg_current_xact_id()::text::bigint << 20 \
             AND e.last_id < (pg_current_xact_id()::text::bigint + 1) << 20), \
         u AS (SELECT * FROM c WHERE state = 'cancelled') \
         {}",
        super::events::from_updated_with("cancelled", "$6", "'DEPENDENCY_FAILED'")
    )))
    .bind(&ids)
    .bind(&st)
    .bind(&rem)
    .bind(&run_if)
    .bind(&sched)
    .bind(ms(now))
    .execute(&mut *tx)
    .await?;
    if commit_by.is_some_and(|d| std::time::Instant::now() >= d) {
        tx.rollback().await?;
        return Ok(FlowInserted::DeadlinePassed);
    }
    tx.commit().await?;
    Ok(FlowInserted::Done(inserted))
}

pub(super) async fn flow_info(
    pool: &PgPool,
    ids: &[String],
) -> StoreResult<HashMap<String, TaskFlowInfo>> {
    /// id, deps_remaining, run_if_dependency_fails, cancel_reason, depends_on.
    type InfoRow = (String, i64, bool, Option<String>, Vec<String>);
    let rows: Vec<InfoRow> = sqlx::query_as(
        "SELECT t.id, t.deps_remaining, t.run_if_dependency_fails, t.cancel_reason, \
           COALESCE(array_agg(d.depends_on ORDER BY d.depends_on) \
             FILTER (WHERE d.depends_on IS NOT NULL), '{}') \
         FROM tasks t LEFT JOIN task_deps d ON d.task_id = t.id \
         WHERE t.id = ANY($1) GROUP BY t.id, t.deps_remaining, t.run_if_dependency_fails, \
           t.cancel_reason",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    let mut keys: HashMap<String, Vec<TaskKey>> = HashMap::new();
    let key_rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT task_id, queue, key FROM task_key_deps WHERE task_id = ANY($1) \
         ORDER BY task_id, queue, key",
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    for (id, queue, key) in key_rows {
        keys.entry(id).or_default().push(TaskKey { queue, key });
    }
    Ok(rows
        .into_iter()
        .map(|(id, rem, run_if, reason, deps)| {
            let info = TaskFlowInfo {
                depends_on_keys: keys.remove(&id).unwrap_or_default(),
                depends_on: deps,
                deps_remaining: u32::try_from(rem.max(0)).unwrap_or(u32::MAX),
                run_if_dependency_fails: run_if,
                cancel_reason: reason,
            };
            (id, info)
        })
        .collect())
}


pub(super) async fn select(pool: &PgPool, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
    let push_where = |qb: &mut sqlx::QueryBuilder<Postgres>| {
        qb.push(" AND queue = ").push_bind(&f.queue);
        if let Some(p) = &f.key_prefix {
            qb.push(" AND left(key, length(")
                .push_bind(p)
                .push(")) = ")
                .push_bind(p);
        }
        if let Some(e) = &f.error_contains {
            qb.push(" AND strpos(COALESCE(last_error, ''), ")
                .push_bind(e)
                .push(") > 0");
        }
        if let Some(t) = f.created_after {
            qb.push(" AND created_at >= ").push_bind(ms(t));
        }
        if let Some(t) = f.created_before {
            qb.push(" AND created_at < ").push_bind(ms(t));
        }
        if let Some(s) = &f.schedule_id {
            qb.push(" AND schedule_id = ").push_bind(s);
        }
        if let Some(sql) = state_filter_sql(&f.states, &ms(f.now).to_string()) {
            qb.push(" AND ").push(sql);
        }
    };
    let limit = i64::from(f.limit);
    let mut qb = if f.created_after.is_some() || f.created_before.is_some() {
        // tasks_created leaves LEASED rows out (0013): a creation-time range reads
        // them apart, so both parts keep an index.
        let mut qb = sqlx::QueryBuilder::<Postgres>::new(
            "SELECT * FROM ((SELECT * FROM tasks WHERE state <> 'leased'",
        );
        push_where(&mut qb);
        qb.push(" ORDER BY seq LIMIT ")
            .push_bind(limit)
            .push(") UNION ALL (SELECT * FROM tasks WHERE state = 'leased'");
        push_where(&mut qb);
        qb.push(" ORDER BY seq LIMIT ")
            .push_bind(limit)
            .push(")) u");
        qb
    } else {
        let mut qb = sqlx::QueryBuilder::<Postgres>::new("SELECT * FROM tasks WHERE TRUE");
        push_where(&mut qb);
        qb
    };
    qb.push(" ORDER BY seq LIMIT ").push_bind(limit);
    qb.build_query_as::<TaskRow>()
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(TaskRow::into_record)
        .collect()
}

pub(super) async fn cancel_many(
    pool: &PgPool,
    ids: &[String],
    now: DateTime<Utc>,
) -> StoreResult<BulkCancelled> {
    let mut tx = pool.begin().await?;
    // Flow: each statement records its events.
    let cancelled: Option<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "WITH u AS (UPDATE tasks t SET state = 'cancelled', cancel_reason = 'operator', \
           finished_at = $2, updated_at = $2 \
         WHERE id IN (SELECT id FROM tasks WHERE id = ANY($1) \
           AND state IN ('pending', 'blocked') ORDER BY id FOR UPDATE) RETURNING t.id, t.queue, t.state, t.attempt, t.run_at) {}",
        super::events::from_updated("cancelled", "$2")
    )))
    .bind(ids)
    .bind(ms(now))
    .fetch_optional(&mut *tx)
    .await?;
    let cancelled = super::events::changed(cancelled);
    let requested: Option<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "WITH u AS (UPDATE tasks t SET cancel_requested = TRUE, updated_at = $2 \
         WHERE id IN (SELECT id FROM tasks WHERE id = ANY($1) AND state = 'leased' \
           AND NOT cancel_requested ORDER BY id FOR UPDATE) RETURNING t.id, t.queue, t.state, t.attempt, t.run_at) {}",
        super::events::from_updated("updated", "$2")
    )))
    .bind(ids)
    .bind(ms(now))
    .fetch_optional(&mut *tx)
    .await?;
    let requested = super::events::changed(requested);
    tx.commit().await?;
    Ok(BulkCancelled {
        cancelled,
        cancel_requested: requested,
    })
}

pub(super) async fn requeue_many(
    pool: &PgPool,
    tasks: &[(String, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    let ids: Vec<&str> = tasks.iter().map(|t| t.0.as_str()).collect();
    let run_at: Vec<i64> = tasks.iter().map(|t| ms(t.1)).collect();
    let mut tx = pool.begin().await?;
    let queues: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "WITH u AS (UPDATE tasks t SET state = 'pending', run_at = r.run_at, waiting = r.run_at > $3, \
           attempts_allowed = t.attempt + t.max_attempts, cancel_requested = FALSE, \
           cancel_reason = NULL, finished_at = NULL, updated_at = $3 \
         FROM UNNEST($1::text[], $2::bigint[]) AS r(id, run_at) \
         WHERE t.id = r.id AND t.state IN ('dead', 'cancelled') RETURNING t.id, t.queue, t.state, t.attempt, t.run_at), \
         ev AS ({}) SELECT queue FROM u",
        super::events::from_updated("requeued", "$3")
    )))
    .bind(&ids)
    .bind(&run_at)
    .bind(ms(now))
    .fetch_all(&mut *tx)
    .await?;
    let distinct: HashSet<&str> = queues.iter().map(String::as_str).collect();
    let distinct: Vec<&str> = distinct.into_iter().collect();
    sqlx::query("SELECT pg_notify($1, q) FROM UNNEST($2::text[]) AS q")
        .bind(CHANNEL)
        .bind(&distinct)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(queues.len() as u64)
}

/// See [`Store::task_keys_missing`].
pub(super) async fn keys_missing(
    pool: &PgPool,
    task_id: &str,
    limit: u32,
) -> StoreResult<Vec<TaskKey>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT queue, key FROM task_key_deps WHERE task_id = $1 AND bound_to IS NULL \
         ORDER BY queue, key LIMIT $2",
    )
    .bind(task_id)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(queue, key)| TaskKey { queue, key })
        .collect())
}

/// See [`Store::task_dependency_results`].
pub(super) async fn dependency_results(
    pool: &PgPool,
    task_ids: &[String],
) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
    Ok(sqlx::query_as(
        "SELECT d.task_id, t.id, COALESCE(t.result, '\\x'::bytea) FROM task_deps d \
         JOIN tasks t ON t.id = d.depends_on \
         WHERE d.task_id = ANY($1) AND t.state = 'succeeded' ORDER BY d.task_id, t.id",
    )
    .bind(task_ids)
    .fetch_all(pool)
    .await?)
}

/// See [`Store::task_dependency_result_sizes`].
pub(super) async fn dependency_result_sizes(
    pool: &PgPool,
    task_ids: &[String],
) -> StoreResult<Vec<(String, u64, u64)>> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT d.task_id, count(*), \
           sum(octet_length(t.id) + COALESCE(octet_length(t.result), 0))::bigint \
         FROM task_deps d JOIN tasks t ON t.id = d.depends_on \
         WHERE d.task_id = ANY($1) AND t.state = 'succeeded' GROUP BY d.task_id",
    )
    .bind(task_ids)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, n, bytes)| (id, n.max(0) as u64, bytes.max(0) as u64))
        .collect())
}
