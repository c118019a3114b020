-- The task row.

-- name: task_lock
-- The task row, locked until the transaction ends (every checked change starts here).
SELECT * FROM tasks WHERE id = $1 FOR UPDATE
