-- piece: queue_stats_finished
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
-- The counts by queue and state: this part, then (each followed by
-- ` AND queue IN (...)` when queues are named) queue_stats_finished_recent,
-- queue_stats_leased, queue_stats_pending_head, now, queue_stats_pending, and
-- ` GROUP BY queue, state, later`. One statement, so the finished counts and
-- the watermark are of one snapshot.
-- The finished counts are read in proportion to the tasks finished lately, not
-- to the table (migration 0008): the counts folded into finished_counts, then
-- the tasks finished after the watermark, through tasks_finished
-- (finished_state, finished_at; migration 0010); finished_fold joins as a
-- constant table (its primary key), so the watermark bounds the range. Leased
-- rows are read through tasks_lease and pending rows through tasks_lease too,
-- which holds run_at (left to choose, the optimizer may take another index led
-- by `state` for the pending part: a read of each pending row for run_at).
SELECT queue, state, FALSE AS later, CAST(SUM(n) AS SIGNED), CAST(0 AS SIGNED) FROM (
SELECT queue, state, n FROM finished_counts WHERE n <> 0

-- piece: queue_stats_finished_recent
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
UNION ALL SELECT t.queue, t.state, COUNT(*) FROM finished_fold w
JOIN tasks t FORCE INDEX (tasks_finished) ON t.finished_at > w.watermark
WHERE w.id = 1 AND t.finished_state IN ('succeeded', 'dead', 'cancelled')

-- piece: queue_stats_leased
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
GROUP BY t.queue, t.state) f GROUP BY queue, state HAVING SUM(n) > 0
UNION ALL SELECT queue, 'leased', FALSE, COUNT(*),
CAST(0 AS SIGNED) FROM tasks WHERE state = 'leased'

-- piece: queue_stats_pending_head
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
GROUP BY queue UNION ALL SELECT queue, state, run_at >

-- piece: queue_stats_pending
-- own: MySQL takes no array parameter, so queue_stats is joined at run time from these parts, each with its queue list
AS later, COUNT(*), CAST(MIN(run_at) AS SIGNED) FROM tasks FORCE INDEX (tasks_lease)
WHERE state = 'pending'

-- fragment: recent_attempts
-- The attempts that finished at or after a time (bound twice, ms), as rows
-- (queue, worker_id, leased_at, finished_at, outcome). An attempt that ended
-- otherwise than in success has its row in task_attempts, found through
-- task_attempts_finished; a succeeded one is its task's row (migration 0011),
-- found through tasks_finished (finished_state, finished_at), unless task_attempts
-- holds it (a success recorded before 0011), looked up by key for each: an
-- outer join (a NOT EXISTS, over a long window, MariaDB materializes by
-- reading the whole of task_attempts).
SELECT t.queue, a.worker_id, a.leased_at, a.finished_at, a.outcome
FROM task_attempts a JOIN tasks t ON t.id = a.task_id WHERE a.finished_at >= ?
UNION ALL
SELECT t.queue, COALESCE(t.leased_by, ''), COALESCE(t.leased_at, t.updated_at),
  t.finished_at, 'succeeded'
FROM tasks t FORCE INDEX (tasks_finished)
LEFT JOIN task_attempts x ON x.task_id = t.id AND x.attempt = t.attempt
WHERE t.finished_state = 'succeeded' AND t.finished_at >= ? AND x.task_id IS NULL

-- name: queue_stats_recent
-- The attempts of the last minute by queue and outcome: binds the minute's
-- start twice; followed by ` WHERE queue IN (...)` when queues are named, then
-- the grouping.
SELECT queue, outcome, COUNT(*) FROM (${recent_attempts}) r

-- name: attempt_histogram
-- The window's attempts (binds its start, the bucket's length, its start
-- twice, its end, the queue twice), optionally of one queue.
SELECT queue, CAST(FLOOR((finished_at - ?) / ?) AS SIGNED) AS b,
  CAST(SUM(CASE WHEN outcome = 'succeeded' THEN 1 ELSE 0 END) AS SIGNED),
  CAST(SUM(CASE WHEN outcome = 'succeeded' THEN 0 ELSE 1 END) AS SIGNED)
FROM (${recent_attempts}) r
WHERE finished_at < ? AND (? IS NULL OR queue = ?)
GROUP BY queue, b ORDER BY queue, b

-- name: attempt_durations
-- The run times of the attempts that succeeded since a time (bound twice),
-- the latest first, at most a limit.
SELECT queue, finished_at - leased_at FROM (${recent_attempts}) r
WHERE outcome = 'succeeded' ORDER BY finished_at DESC LIMIT ?

-- name: finished_fold_lock
-- The watermark of the finished counts, locked against other replicas' folds
-- and the changes that take tasks out of their counts (finished_share).
SELECT watermark FROM finished_fold WHERE id = 1 FOR UPDATE

-- name: finished_fold_bound
-- Where a fold of bounded size ends: the earliest, over the finished states,
-- of the finish time of the (offset + 1)-th task of the state finished after
-- the watermark and at or before the end (binds watermark, end, offset per
-- state), each a range of tasks_finished (finished_state, finished_at).
SELECT MIN(f) FROM (
(SELECT finished_at AS f FROM tasks FORCE INDEX (tasks_finished)
  WHERE finished_state = 'succeeded' AND finished_at > ? AND finished_at <= ?
  ORDER BY finished_at LIMIT 1 OFFSET ?)
UNION ALL
(SELECT finished_at FROM tasks FORCE INDEX (tasks_finished)
  WHERE finished_state = 'dead' AND finished_at > ? AND finished_at <= ?
  ORDER BY finished_at LIMIT 1 OFFSET ?)
UNION ALL
(SELECT finished_at FROM tasks FORCE INDEX (tasks_finished)
  WHERE finished_state = 'cancelled' AND finished_at > ? AND finished_at <= ?
  ORDER BY finished_at LIMIT 1 OFFSET ?)) b

-- name: finished_fold_add
-- The tasks finished after the watermark and at or before the end, added to
-- their counts, appended (a consistent read: READ COMMITTED locks no task).
INSERT INTO finished_counts (queue, state, n)
SELECT queue, state, COUNT(*) FROM tasks FORCE INDEX (tasks_finished)
WHERE finished_state IN ('succeeded', 'dead', 'cancelled')
  AND finished_at > ? AND finished_at <= ?
GROUP BY queue, state

-- name: finished_fold_compact_last
-- own: Postgres and MySQL keep the counts as a log that concurrent changes append to (SQLite has one writer and updates its rows in place); MySQL, without data-modifying CTEs, sums it in three statements
-- The last row of the log of counts (migration 0009), when it holds more than
-- one row for some (queue, state): none otherwise.
SELECT MAX(id) FROM finished_counts HAVING COUNT(*) > COUNT(DISTINCT queue, state)

-- name: finished_fold_compact_sum
-- own: Postgres and MySQL keep the counts as a log that concurrent changes append to (SQLite has one writer and updates its rows in place); MySQL, without data-modifying CTEs, sums it in three statements
-- The log up to that row summed into one row per (queue, state), appended;
-- run under the watermark's lock, so no change appends meanwhile.
INSERT INTO finished_counts (queue, state, n)
SELECT queue, state, SUM(n) FROM finished_counts WHERE id <= ?
GROUP BY queue, state HAVING SUM(n) <> 0

-- name: finished_fold_compact_drop
-- own: Postgres and MySQL keep the counts as a log that concurrent changes append to (SQLite has one writer and updates its rows in place); MySQL, without data-modifying CTEs, sums it in three statements
DELETE FROM finished_counts WHERE id <= ?

-- name: finished_fold_mark
UPDATE finished_fold SET watermark = ? WHERE id = 1

-- name: finished_share
-- own: MySQL runs no trigger (it needs SUPER where binary logging is on), so the changes that take a task out of a finished state adjust its count themselves
-- The watermark, in share mode: a change that takes tasks out of their
-- finished counts holds it to its commit, so no fold runs between its read and
-- its adjustment.
SELECT watermark FROM finished_fold WHERE id = 1 LOCK IN SHARE MODE

-- piece: finished_shift_head
-- own: MySQL runs no trigger (it needs SUPER where binary logging is on), so the changes that take a task out of a finished state adjust its count themselves
-- Adds (the sign bound first) the tasks of a list of seqs that are in a
-- finished state and finished at or before the watermark (bound next) to their
-- counts: followed by one placeholder per seq, then finished_shift_tail.
INSERT INTO finished_counts (queue, state, n)
SELECT queue, state, COUNT(*) * ? FROM tasks
WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at <= ? AND seq IN (

-- piece: finished_shift_tail
-- own: MySQL runs no trigger (it needs SUPER where binary logging is on), so the changes that take a task out of a finished state adjust its count themselves
) GROUP BY queue, state
