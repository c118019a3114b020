-- What the console and the metrics read: queue counts, attempt histograms and
-- durations.

-- name: queue_stats
-- own: Postgres filters the queues with = ANY($n), so the counts are one fixed statement, with and without a queue list
-- Counts per queue and state, all queues (now $1 and $2). Index-only scans
-- instead of one over the table: finished and blocked rows through the (queue,
-- state) index, leased rows through tasks_leased and pending rows in two parts,
-- through the lease index (not waiting) and tasks_waiting (each predicate names
-- its index's).
SELECT queue, state, FALSE, COUNT(*), 0::BIGINT FROM tasks
WHERE state NOT IN ('pending', 'leased') GROUP BY queue, state
UNION ALL SELECT queue, 'leased', FALSE, COUNT(*), 0::BIGINT
FROM tasks WHERE state = 'leased' GROUP BY queue
UNION ALL SELECT queue, state, run_at > $1 AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND NOT waiting GROUP BY queue, state, later
UNION ALL SELECT queue, state, run_at > $2 AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND waiting GROUP BY queue, state, later

-- name: queue_stats_queues
-- own: Postgres filters the queues with = ANY($n), so the counts are one fixed statement, with and without a queue list
-- As queue_stats, of the queues $1, $2, $4, $6 (now $3 and $5).
SELECT queue, state, FALSE, COUNT(*), 0::BIGINT FROM tasks
WHERE state NOT IN ('pending', 'leased') AND queue = ANY($1) GROUP BY queue, state
UNION ALL SELECT queue, 'leased', FALSE, COUNT(*), 0::BIGINT
FROM tasks WHERE state = 'leased' AND queue = ANY($2) GROUP BY queue
UNION ALL SELECT queue, state, run_at > $3 AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND NOT waiting AND queue = ANY($4) GROUP BY queue, state, later
UNION ALL SELECT queue, state, run_at > $5 AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND waiting AND queue = ANY($6) GROUP BY queue, state, later

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
