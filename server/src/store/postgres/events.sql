-- The event log: reading it, its horizon's neighbours, purging it, and the
-- event rows of the paths that record theirs apart (see tx.rs).

-- name: event_list
-- The task's rows through the GIN index on task_ids; a row holds the events
-- of other tasks too.
SELECT ${event_columns} FROM task_event_batches b, ${event_unnest}
WHERE b.task_ids @> ARRAY[$1::text] AND b.last_id > $2
  AND e.task_id = $1 AND b.first_id + e.o - 1 > $2
ORDER BY 1 LIMIT $3

-- name: event_read
-- Below the horizon $3. A row with last_id above the cursor holds at least one
-- event after it, so `limit` rows hold at least `limit` events; a row's ids are
-- all of one transaction, so it lies wholly below the horizon or at or above it.
SELECT ${event_columns} FROM (SELECT * FROM task_event_batches
  WHERE last_id > $1 AND last_id < $3 ORDER BY last_id LIMIT $2) b, ${event_unnest}
WHERE b.first_id + e.o - 1 > $1 ORDER BY 1 LIMIT $2

-- name: event_ceiling
-- own: Postgres's event ids come from transaction ids, so the log's edge is a horizon of running transactions, not the largest id
-- An id at or above every committed event's: a snapshot's `xmax` is one past
-- the newest ended transaction.
SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::bigint << 20) - 1

-- name: event_held_since
-- own: Postgres's event ids come from transaction ids, so the log's edge is a horizon of running transactions, not the largest id
-- The time of the first event at or above the horizon $1.
SELECT times[1] FROM task_event_batches WHERE last_id >= $1 ORDER BY last_id LIMIT 1

-- name: event_purge
-- Ids grow with time: of the oldest rows by id, holding $2 events together (at
-- least the first row), those whose every event is older than $1 (no time index
-- to keep up on every event). A row goes whole.
WITH gone AS (DELETE FROM task_event_batches b WHERE b.last_id IN (
  SELECT last_id FROM (SELECT last_id, times,
      sum(cardinality(task_ids)) OVER (ORDER BY last_id) - cardinality(task_ids)
        AS before_it
    FROM (SELECT last_id, task_ids, times FROM task_event_batches
      ORDER BY last_id LIMIT $2) f) o
  WHERE before_it < $2 AND (SELECT max(t) FROM unnest(times) AS t) < $1)
RETURNING cardinality(b.task_ids) AS n)
SELECT sum(n)::bigint FROM gone

-- name: event_record
-- own: Postgres keeps a transaction's events as one task_event_batches row of arrays, with ids from its transaction id
-- Events given as arrays, in their order, as one row (the paths that send
-- their events apart, in the transaction of their change).
INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds, states,
  attempts, workers, times, details) SELECT b, b + cardinality($1::text[]) - 1,
  $1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
  $7::bigint[], $8::text[] FROM ${event_base} AS base(b)

-- fragment: event_columns
-- An event row of `task_event_batches b` unnested as `e` (with event_unnest).
b.first_id + e.o - 1 AS event_id, e.task_id, e.queue, e.kind,
  e.state, e.attempt, e.worker_id, e.time, e.detail

-- fragment: event_unnest
-- The events of the row `b`, with their place `o` (from 1).
unnest(b.task_ids, b.queues, b.kinds, b.states, b.attempts,
  b.workers, b.times, b.details) WITH ORDINALITY
  AS e(task_id, queue, kind, state, attempt, worker_id, time, detail, o)

-- fragment: event_base
-- The first free event id of the running transaction: an uncorrelated
-- sub-select, evaluated once per statement (one backward probe of the
-- `last_id` index within the transaction's id range).
(SELECT COALESCE(max(last_id) + 1, pg_current_xact_id()::text::bigint << 20)
   FROM task_event_batches WHERE last_id >= pg_current_xact_id()::text::bigint << 20
   AND last_id < (pg_current_xact_id()::text::bigint + 1) << 20)

-- fragment: event_batch
-- The start of an event insert: `${event_batch} SELECT <task id>, <queue>,
-- <kind>, <state>, <attempt>, <worker>, <time>, <detail> FROM ... ${event_batch_end}`
-- records the sub-select's rows, in their order, as one row (none when it has
-- no rows). The statement returns that row's event count.
INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds,
   states, attempts, workers, times, details) SELECT ${event_base}, ${event_base}
   + count(*) - 1, array_agg(e.t), array_agg(e.q), array_agg(e.k), array_agg(e.s),
   array_agg(e.a), array_agg(e.w), array_agg(e.at), array_agg(e.d) FROM (

-- fragment: event_batch_end
) AS e(t, q, k, s, a, w, at, d) HAVING count(*) > 0 RETURNING cardinality(task_ids)

-- fragment: leased_event
-- The LEASED events of a lease statement, as its CTE `ev`: one per row of the
-- CTE `leased` (the rows the lease changed: `id, queue, attempt, leased_by`), at
-- $2 (the lease's clock, ms).
ev AS (${event_batch}SELECT id, queue, 'leased', 'leased', attempt, leased_by, $2::bigint, NULL FROM leased${event_batch_end})
