-- name: queue_stats_finished
-- own: SQLite takes no array parameter, so queue_stats is joined at run time from these parts (UNION ALL), each with its queue filter and grouping
-- Index-only scans instead of one over the table: finished and blocked rows
-- through the (queue, state) index. `Observe::queue_stats` joins the four counts with
-- UNION ALL, each with its queue filter and grouping.
SELECT queue, state, 0, COUNT(*), 0 FROM tasks WHERE state NOT IN ('pending', 'leased');

-- name: queue_stats_leased
-- own: SQLite takes no array parameter, so queue_stats is joined at run time from these parts (UNION ALL), each with its queue filter and grouping
-- Leased rows through tasks_leased.
SELECT queue, 'leased', 0, COUNT(*), 0 FROM tasks WHERE state = 'leased';

-- name: queue_stats_ready
-- own: SQLite takes no array parameter, so queue_stats is joined at run time from these parts (UNION ALL), each with its queue filter and grouping
-- Pending rows not waiting, through the lease index (? now).
SELECT queue, state, run_at > ? AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND waiting = 0;

-- name: queue_stats_waiting
-- own: SQLite takes no array parameter, so queue_stats is joined at run time from these parts (UNION ALL), each with its queue filter and grouping
-- Pending rows waiting, through tasks_waiting (? now).
SELECT queue, state, run_at > ? AS later, COUNT(*), MIN(run_at) FROM tasks
WHERE state = 'pending' AND waiting = 1;

-- name: queue_stats_recent
-- The outcomes of the last minute (? the minute before now).
SELECT t.queue, a.outcome, COUNT(*) FROM task_attempts a
JOIN tasks t ON t.id = a.task_id WHERE a.finished_at >= ?;

-- name: attempt_histogram
SELECT t.queue, (a.finished_at - ?1) / ?3 AS b,
  SUM(CASE WHEN a.outcome = 'succeeded' THEN 1 ELSE 0 END),
  SUM(CASE WHEN a.outcome = 'succeeded' THEN 0 ELSE 1 END)
FROM task_attempts a JOIN tasks t ON t.id = a.task_id
WHERE a.finished_at >= ?1 AND a.finished_at < ?2
  AND (?4 IS NULL OR t.queue = ?4)
GROUP BY t.queue, b ORDER BY t.queue, b;

-- name: attempt_durations
SELECT t.queue, a.finished_at - a.leased_at FROM task_attempts a
JOIN tasks t ON t.id = a.task_id
WHERE a.finished_at >= ? AND a.outcome = 'succeeded'
ORDER BY a.finished_at DESC LIMIT ?;
