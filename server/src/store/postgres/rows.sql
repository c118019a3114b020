-- The task row.

-- name: task_lock
-- own: Postgres locks the task row (FOR UPDATE) before a checked change; SQLite's one writer needs no row lock
-- The task row, locked until the transaction ends (every checked change starts here).
SELECT * FROM tasks WHERE id = $1 FOR UPDATE
