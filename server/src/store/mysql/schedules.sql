-- name: schedule_insert
-- The definition columns first, in the order of schedule_update.
INSERT IGNORE INTO schedules (spec, start_time, end_time, template, payload, overlap,
misfire, catchup_window_ms, paused, max_runs, next_spec_at, buffered_at,
next_fire_at, state_reason, id, created_by, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: schedule_get
SELECT * FROM schedules WHERE id = ?

-- name: schedule_list_head
-- Followed by ` AND ...` per filter given, then the order and the limit.
SELECT * FROM schedules WHERE 1 = 1

-- name: schedule_update
UPDATE schedules SET spec = ?, start_time = ?, end_time = ?, template = ?,
payload = ?, overlap = ?, misfire = ?, catchup_window_ms = ?, paused = ?,
max_runs = ?, next_spec_at = ?, buffered_at = ?, next_fire_at = ?,
state_reason = ?, updated_at = ?, version = version + 1
WHERE id = ? AND version = ?

-- name: schedule_delete_runs
DELETE FROM schedule_runs WHERE schedule_id = ?

-- name: schedule_delete
DELETE FROM schedules WHERE id = ?

-- name: schedule_due
SELECT s.*, t.state IN ('pending', 'leased') AS previous_unfinished
FROM schedules s LEFT JOIN tasks t ON t.id = s.last_task_id
WHERE s.paused = FALSE AND s.next_fire_at IS NOT NULL AND s.next_fire_at <= ?
ORDER BY s.next_fire_at LIMIT ?

-- name: schedule_fire_cursor
-- Moves the cursor by its version (the row stays locked until the commit).
UPDATE schedules SET next_spec_at = ?, buffered_at = ?, next_fire_at = ?,
state_reason = ?, updated_at = ?, version = version + 1
WHERE id = ? AND version = ?

-- name: schedule_fire_cancel_pick
-- own: MySQL has no UPDATE ... RETURNING, so a fire's cancel reads the task (FOR UPDATE), then writes it by seq
SELECT seq, state, queue, attempt FROM tasks WHERE id = ? FOR UPDATE

-- name: schedule_fire_cancel
UPDATE tasks SET state = 'cancelled', finished_at = ?, updated_at = ?
WHERE seq = ?

-- name: schedule_fire_cancel_leased
UPDATE tasks SET cancel_requested = TRUE, updated_at = ? WHERE seq = ?

-- name: schedule_fire_run
INSERT IGNORE INTO schedule_runs (schedule_id, fire_time, task_id, triggered,
created_at) VALUES (?, ?, ?, ?, ?)

-- piece: schedule_fire_mark
-- The tasks a run made: followed by one placeholder per task, then `)`.
UPDATE tasks SET schedule_id = ?, fire_time = ? WHERE id IN (

-- name: schedule_fire_holder
SELECT metadata FROM tasks WHERE id = ?

-- name: schedule_fire_run_holder
-- The run names the task holding its key.
UPDATE schedule_runs SET task_id = ?
WHERE schedule_id = ? AND fire_time = ?

-- name: schedule_fire_run_task
SELECT task_id FROM schedule_runs WHERE schedule_id = ? AND fire_time = ?

-- name: schedule_fire_summary
UPDATE schedules SET runs = runs + ?,
last_fire_at = GREATEST(COALESCE(last_fire_at, ?), ?), last_task_id = ? WHERE id = ?

-- name: schedule_run_list_head
-- Followed by ` AND ...` per filter given, then the order and the limit.
SELECT r.fire_time, r.task_id, r.triggered, t.state, t.run_at, t.last_error FROM schedule_runs r
LEFT JOIN tasks t ON t.id = r.task_id WHERE r.schedule_id = ?
