-- name: queue_stats_finished
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
-- The counts by queue and state: this part, then (each followed by
-- ` AND queue IN (...)` when queues are named) queue_stats_leased,
-- queue_stats_pending_head, now, queue_stats_pending, and
-- ` GROUP BY queue, state, later`.
-- Each part reads one index and no row (as the other stores' counts do): finished
-- and blocked rows through tasks_queue_state, whose order is the grouping's (no
-- temporary table, no sort), leased rows through tasks_lease and pending rows
-- through tasks_lease too, which holds run_at. Left to choose, the optimizer takes
-- tasks_lease for the first part (a range on state, then a sort of every row) and
-- tasks_lease_expiry for the pending part (a read of each pending row for run_at).
SELECT queue, state, FALSE AS later, COUNT(*), CAST(0 AS SIGNED)
FROM tasks FORCE INDEX (tasks_queue_state) WHERE state NOT IN ('pending', 'leased')

-- piece: queue_stats_leased
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
GROUP BY queue, state UNION ALL SELECT queue, 'leased', FALSE, COUNT(*),
CAST(0 AS SIGNED) FROM tasks WHERE state = 'leased'

-- piece: queue_stats_pending_head
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
GROUP BY queue UNION ALL SELECT queue, state, run_at >

-- piece: queue_stats_pending
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
AS later, COUNT(*), CAST(MIN(run_at) AS SIGNED) FROM tasks FORCE INDEX (tasks_lease)
WHERE state = 'pending'

-- name: queue_stats_recent
-- The attempts of the last minute by queue and outcome: binds the minute's
-- start; followed by ` AND t.queue IN (...)` when queues are named, then the
-- grouping.
SELECT t.queue, a.outcome, COUNT(*) FROM task_attempts a
JOIN tasks t ON t.id = a.task_id WHERE a.finished_at >= ?

-- name: attempt_histogram
SELECT t.queue, CAST(FLOOR((a.finished_at - ?) / ?) AS SIGNED) AS b,
  CAST(SUM(CASE WHEN a.outcome = 'succeeded' THEN 1 ELSE 0 END) AS SIGNED),
  CAST(SUM(CASE WHEN a.outcome = 'succeeded' THEN 0 ELSE 1 END) AS SIGNED)
FROM task_attempts a JOIN tasks t ON t.id = a.task_id
WHERE a.finished_at >= ? AND a.finished_at < ? AND (? IS NULL OR t.queue = ?)
GROUP BY t.queue, b ORDER BY t.queue, b

-- name: attempt_durations
SELECT t.queue, a.finished_at - a.leased_at FROM task_attempts a
JOIN tasks t ON t.id = a.task_id
WHERE a.finished_at >= ? AND a.outcome = 'succeeded'
ORDER BY a.finished_at DESC LIMIT ?
