-- The event CTE of the hot statements (see tx.rs) and the wake-up NOTIFY.

-- name: queue_notify
-- own: NOTIFY wakes the long-polls of every replica; one process needs no message
-- Wakes the long-polls of the queues $2 (channel $1), at commit.
SELECT pg_notify($1, q) FROM UNNEST($2::text[]) AS q

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
