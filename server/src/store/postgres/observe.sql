-- What the console and the metrics read: queue counts, attempt histograms and
-- durations.

-- name: queue_stats
-- own: Postgres filters the queues with = ANY($n), so the counts are one fixed statement, with and without a queue list
-- Counts per queue and state, all queues (now $1). The finished counts are
-- read in proportion to the tasks finished lately, not to the table (migration
-- 0024): the counts folded into finished_counts, plus, per queue (walked one
-- index probe each) and finished state, the range of tasks_queue_state
-- (queue, state, finished_at) after the watermark; one statement, so the
-- counts and the watermark are of one snapshot. Then index-only scans: leased
-- rows through tasks_leased and pending rows in two parts, through the lease
-- index (not waiting) and tasks_waiting (each predicate names its index's).
WITH RECURSIVE ${finished_queues}
SELECT queue, state, FALSE, SUM(n)::BIGINT, 0::BIGINT FROM (
  SELECT queue, state, n FROM finished_counts WHERE n <> 0
  UNION ALL ${finished_recent}) f
GROUP BY queue, state HAVING SUM(n) > 0
UNION ALL SELECT queue, 'leased', FALSE, COUNT(*), 0::BIGINT
FROM tasks WHERE state = 'leased' GROUP BY queue
UNION ALL SELECT queue, state, run_at > $1 AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND NOT waiting GROUP BY queue, state, later
UNION ALL SELECT queue, state, run_at > $1 AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND waiting GROUP BY queue, state, later

-- name: queue_stats_queues
-- own: Postgres filters the queues with = ANY($n), so the counts are one fixed statement, with and without a queue list
-- As queue_stats, of the queues $1 (now $2).
WITH qs(q) AS (SELECT DISTINCT q FROM unnest($1::text[]) AS u(q))
SELECT queue, state, FALSE, SUM(n)::BIGINT, 0::BIGINT FROM (
  SELECT queue, state, n FROM finished_counts WHERE n <> 0 AND queue = ANY($1)
  UNION ALL ${finished_recent}) f
GROUP BY queue, state HAVING SUM(n) > 0
UNION ALL SELECT queue, 'leased', FALSE, COUNT(*), 0::BIGINT
FROM tasks WHERE state = 'leased' AND queue = ANY($1) GROUP BY queue
UNION ALL SELECT queue, state, run_at > $2 AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND NOT waiting AND queue = ANY($1) GROUP BY queue, state, later
UNION ALL SELECT queue, state, run_at > $2 AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND waiting AND queue = ANY($1) GROUP BY queue, state, later

-- fragment: finished_queues
-- `qs(q)`: the queues with finished or blocked tasks, one probe of
-- tasks_queue_state each, and a NULL last. Follows `WITH RECURSIVE`.
qs(q) AS (
  SELECT (SELECT queue FROM tasks WHERE state NOT IN ('pending', 'leased')
    ORDER BY queue LIMIT 1)
  UNION ALL
  SELECT (SELECT t.queue FROM tasks t WHERE t.state NOT IN ('pending', 'leased')
    AND t.queue > qs.q ORDER BY t.queue LIMIT 1)
  FROM qs WHERE qs.q IS NOT NULL)

-- fragment: finished_recent
-- Per queue of `qs` and finished state, its tasks finished after the
-- watermark: a range of tasks_queue_state each.
SELECT qs.q, s.state, (SELECT COUNT(*) FROM tasks t WHERE t.queue = qs.q
    AND t.state = s.state AND t.state NOT IN ('pending', 'leased')
    AND t.finished_at > (SELECT watermark FROM finished_fold WHERE id = 1))
  FROM qs CROSS JOIN unnest(ARRAY['succeeded', 'dead', 'cancelled']) AS s(state)
  WHERE qs.q IS NOT NULL

-- name: queue_stats_recent
-- Attempts of the last minute (since $1) per queue and outcome: all queues
-- ($2) or those of $3.
${recent_attempts} SELECT queue, outcome, COUNT(*) FROM recent
WHERE ($2 OR queue = ANY($3)) GROUP BY queue, outcome

-- name: attempt_histogram
-- The window's attempts ($1 to $2, buckets of $3 ms), optionally of one queue ($4).
${recent_attempts} SELECT queue, (finished_at - $1) / $3 AS b,
  COUNT(*) FILTER (WHERE outcome = 'succeeded'),
  COUNT(*) FILTER (WHERE outcome <> 'succeeded')
FROM recent WHERE finished_at < $2 AND ($4::text IS NULL OR queue = $4)
GROUP BY queue, b ORDER BY queue, b

-- name: attempt_durations
${recent_attempts} SELECT queue, finished_at - leased_at FROM recent
WHERE outcome = 'succeeded' ORDER BY finished_at DESC LIMIT $2

-- fragment: recent_attempts
-- CTEs naming the attempts that finished at or after $1 (ms):
-- `recent(queue, worker_id, leased_at, finished_at, outcome)`. An attempt that
-- ended otherwise than in success has its row in task_attempts; a succeeded one
-- is its task's row (migration 0018), found per queue through tasks_queue_state
-- (queue, state, finished_at) after a walk of its queues (one probe each),
-- unless task_attempts holds it (a success recorded before 0018). Starts with
-- `WITH RECURSIVE`; append more CTEs with a comma.
WITH RECURSIVE done_queues(q) AS (
  SELECT (SELECT queue FROM tasks WHERE state NOT IN ('pending', 'leased')
    ORDER BY queue LIMIT 1)
  UNION ALL
  SELECT (SELECT t.queue FROM tasks t WHERE t.state NOT IN ('pending', 'leased')
    AND t.queue > dq.q ORDER BY t.queue LIMIT 1)
  FROM done_queues dq WHERE dq.q IS NOT NULL),
recent(queue, worker_id, leased_at, finished_at, outcome) AS (
  SELECT t.queue, a.worker_id, a.leased_at, a.finished_at, a.outcome
  FROM task_attempts a JOIN tasks t ON t.id = a.task_id WHERE a.finished_at >= $1::bigint
  UNION ALL
  SELECT s.queue, s.worker_id, s.leased_at, s.finished_at, 'succeeded'
  FROM done_queues dq CROSS JOIN LATERAL (
    SELECT t.queue, COALESCE(t.leased_by, '') AS worker_id,
      COALESCE(t.leased_at, t.updated_at) AS leased_at, t.finished_at
    FROM tasks t WHERE t.queue = dq.q AND t.state = 'succeeded'
      AND t.state NOT IN ('pending', 'leased') AND t.finished_at >= $1::bigint
      AND NOT EXISTS (SELECT 1 FROM task_attempts x
        WHERE x.task_id = t.id AND x.attempt = t.attempt)) s
  WHERE dq.q IS NOT NULL)

-- name: finished_fold_lock
-- The watermark of the finished counts, locked against other replicas' folds
-- and the changes that take tasks out of their counts (the trigger of 0025
-- reads it FOR SHARE).
SELECT watermark FROM finished_fold WHERE id = 1 FOR UPDATE

-- name: finished_fold_bound
-- Where a fold of bounded size ends: the earliest, over the queues and
-- finished states, of the finish time of the ($3 + 1)-th task finished after
-- the watermark $1 and at or before $2, each a range of tasks_queue_state.
WITH RECURSIVE ${finished_queues},
nth AS (SELECT (SELECT t.finished_at FROM tasks t WHERE t.queue = qs.q
    AND t.state = s.state AND t.state NOT IN ('pending', 'leased')
    AND t.finished_at > $1::bigint AND t.finished_at <= $2::bigint
    ORDER BY t.finished_at OFFSET $3::bigint LIMIT 1) AS f
  FROM qs CROSS JOIN unnest(ARRAY['succeeded', 'dead', 'cancelled']) AS s(state)
  WHERE qs.q IS NOT NULL)
SELECT MIN(f) FROM nth

-- name: finished_fold_add
-- The tasks finished after $1 and at or before $2, appended to their counts.
WITH RECURSIVE ${finished_queues},
c AS (SELECT qs.q AS queue, s.state, (SELECT COUNT(*) FROM tasks t WHERE t.queue = qs.q
    AND t.state = s.state AND t.state NOT IN ('pending', 'leased')
    AND t.finished_at > $1::bigint AND t.finished_at <= $2::bigint) AS n
  FROM qs CROSS JOIN unnest(ARRAY['succeeded', 'dead', 'cancelled']) AS s(state)
  WHERE qs.q IS NOT NULL)
INSERT INTO finished_counts (queue, state, n)
SELECT queue, state, n FROM c WHERE n > 0

-- name: finished_fold_compact
-- own: Postgres and MySQL keep the counts as a log that concurrent changes append to (SQLite has one writer and updates its rows in place); Postgres sums it in one statement with a data-modifying CTE
-- The log of counts (migration 0025) summed into one row per (queue, state):
-- run under the watermark's lock, so no change appends to it meanwhile; a no-op
-- when it holds one row per (queue, state) already.
WITH gone AS (DELETE FROM finished_counts WHERE (SELECT COUNT(*) FROM finished_counts)
  > (SELECT COUNT(*) FROM (SELECT DISTINCT queue, state FROM finished_counts) k)
  RETURNING queue, state, n)
INSERT INTO finished_counts (queue, state, n)
SELECT queue, state, SUM(n) FROM gone GROUP BY queue, state HAVING SUM(n) <> 0

-- name: finished_fold_mark
UPDATE finished_fold SET watermark = $1 WHERE id = 1
