-- piece: queue_stats_finished
-- own: SQLite takes no array parameter, so queue_stats is joined at run time from these parts (UNION ALL), each with its queue filter and grouping
-- The finished counts, read in proportion to the tasks finished lately, not to
-- the table (migration 0024): the counts folded into finished_counts, then (after
-- the queue filter) queue_stats_finished_recent, the filter again and
-- ` GROUP BY queue, state) GROUP BY queue, state HAVING SUM(n) > 0`. One
-- statement, so the counts and the watermark are of one snapshot.
SELECT queue, state, 0, SUM(n), 0 FROM (SELECT queue, state, n FROM finished_counts
WHERE n <> 0

-- piece: queue_stats_finished_recent
-- own: SQLite takes no array parameter, so queue_stats is joined at run time from these parts (UNION ALL), each with its queue filter and grouping
-- The tasks finished after the watermark, through tasks_finished (finished_at).
UNION ALL SELECT queue, state, COUNT(*) FROM tasks
WHERE finished_at IS NOT NULL AND finished_at > (SELECT watermark FROM finished_fold WHERE id = 1)
AND state IN ('succeeded', 'dead', 'cancelled')

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

-- name: finished_fold_lock
-- The watermark of the finished counts (the fold runs on the one writer).
SELECT watermark FROM finished_fold WHERE id = 1;

-- name: finished_fold_bound
-- The finish time of the (?3 + 1)-th task finished after the watermark ?1 and
-- at or before ?2, through tasks_finished: where a fold of bounded size ends.
SELECT finished_at FROM tasks WHERE finished_at IS NOT NULL AND finished_at > ?1
AND finished_at <= ?2 ORDER BY finished_at LIMIT 1 OFFSET ?3;

-- name: finished_fold_add
-- The tasks finished after ?1 and at or before ?2, added to their counts.
INSERT INTO finished_counts (queue, state, n)
SELECT queue, state, COUNT(*) FROM tasks WHERE finished_at IS NOT NULL
AND finished_at > ?1 AND finished_at <= ?2 AND state IN ('succeeded', 'dead', 'cancelled')
GROUP BY queue, state
ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n;

-- name: finished_fold_mark
UPDATE finished_fold SET watermark = ?1 WHERE id = 1;
