-- name: task_checkpoint
UPDATE tasks SET checkpoint = ?, lease_expires_at = ?, updated_at = ? WHERE seq = ?

-- name: settle_latest_outcome
-- The outcome of the task's latest attempt, for a settle of a task no longer
-- leased, when it ended otherwise than in success (a succeeded attempt stays
-- on its task row, migration 0011).
SELECT outcome FROM task_attempts WHERE task_id = ? AND attempt = ?

-- name: settle_attempt_end
-- The attempt row of an attempt that ends now otherwise than in success.
INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at,
outcome, error, finished_at, fencing_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE outcome = VALUES(outcome), error = VALUES(error),
finished_at = VALUES(finished_at)

-- name: settle_failure
-- A failed attempt's task: its state per the retry policy.
UPDATE tasks SET state = ?, run_at = ?, finished_at = ?, last_error = ?,
lease_expires_at = NULL, updated_at = ? WHERE seq = ?

-- name: task_complete_write
-- One completion under the row lock. The succeeded attempt stays on the row
-- (leased_by, leased_address, leased_at, fencing_token, finished_at).
UPDATE tasks SET state = 'succeeded', result = ?, finished_at = ?,
lease_expires_at = NULL, updated_at = ? WHERE seq = ?

-- piece: task_complete_many_lock_head
-- own: MySQL takes no array parameter, so a batch of completions locks its rows by an IN list built at run time
-- Followed by one placeholder per task, then `) FOR UPDATE`. By primary key:
-- a lease token names its row's seq (leasing.sql, lease_plain_write). A
-- locking read through the unique index on id also looks up the row first to
-- learn whether a transaction in flight holds the index entry, which the
-- recent ids' pages (written by the submits in flight) nearly always need.
SELECT ${task_columns} FROM tasks WHERE seq IN (

-- piece: task_complete_many_lock_by_id_head
-- own: MySQL takes no array parameter, so a batch of completions locks its rows by an IN list built at run time
-- The rows of completions whose lease token names no seq, by id; followed by
-- one placeholder per task, then `) FOR UPDATE`.
SELECT ${task_columns} FROM tasks WHERE id IN (

-- piece: task_complete_many_write_head
-- own: MySQL takes no array parameter, so a batch of completions writes its task rows by one UPDATE joined to a derived table of their values built at run time
-- Followed by one `SELECT ? AS seq, ? AS result, ? AS now_ms` and one
-- `UNION ALL SELECT ?, ?, ?` per further completion (MySQL 8.0 and MariaDB
-- spell table value constructors differently; both read a UNION ALL), then
-- task_complete_many_write_tail. STRAIGHT_JOIN reads the values first and
-- each task row by its primary key: never a scan of tasks, whose locks would
-- wait for rows other jobs hold.
UPDATE (

-- piece: task_complete_many_write_tail
-- own: MySQL takes no array parameter, so a batch of completions writes its task rows by one UPDATE joined to a derived table of their values built at run time
) v STRAIGHT_JOIN tasks t ON t.seq = v.seq
SET t.state = 'succeeded', t.result = v.result, t.finished_at = v.now_ms,
t.lease_expires_at = NULL, t.updated_at = v.now_ms

-- name: lease_reclaim_expired_past_deadline
-- Rows a settle or another replica's reaper holds are skipped.
SELECT ${task_columns} FROM tasks WHERE deadline IS NOT NULL AND deadline <= ?
AND state IN ('pending', 'leased', 'blocked') LIMIT ? FOR UPDATE SKIP LOCKED

-- name: lease_reclaim_expired_dead
UPDATE tasks SET state = 'dead', finished_at = ?, last_error = ?,
updated_at = ? WHERE seq = ?

-- name: lease_reclaim_expired_leases
SELECT ${task_columns} FROM tasks WHERE state = 'leased' AND lease_expires_at <= ?
LIMIT ? FOR UPDATE SKIP LOCKED
