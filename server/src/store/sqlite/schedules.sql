-- name: schedule_insert
-- ?1 id, ?2..?14 the definition (see `definition_params`), ?15 state reason,
-- ?16 created by, ?17 created at.
INSERT INTO schedules (id, spec, start_time, end_time, template, payload, overlap,
  misfire, catchup_window_ms, paused, max_runs, next_spec_at, buffered_at,
  next_fire_at, state_reason, created_by, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?17)
ON CONFLICT (id) DO NOTHING;

-- name: schedule_update
-- ?1 id, ?2..?14 the definition, ?15 state reason, ?16 now, ?17 the version read.
UPDATE schedules SET spec = ?2, start_time = ?3, end_time = ?4, template = ?5,
  payload = ?6, overlap = ?7, misfire = ?8, catchup_window_ms = ?9, paused = ?10,
  max_runs = ?11, next_spec_at = ?12, buffered_at = ?13, next_fire_at = ?14,
  state_reason = ?15, updated_at = ?16, version = version + 1
WHERE id = ?1 AND version = ?17;

-- name: schedule_delete_runs
DELETE FROM schedule_runs WHERE schedule_id = ?1;

-- name: schedule_delete
DELETE FROM schedules WHERE id = ?1;

-- name: schedule_fire_cursor
-- Moves the cursor, if the schedule is still at the version read.
UPDATE schedules SET next_spec_at = ?1, buffered_at = ?2, next_fire_at = ?3,
  state_reason = ?4, updated_at = ?5, version = version + 1
WHERE id = ?6 AND version = ?7;

-- name: schedule_fire_cancel
-- The previous run's task, if it is still pending (?1 now, ?2 id).
UPDATE tasks SET state = 'cancelled', finished_at = ?1, updated_at = ?1
WHERE id = ?2 AND state = 'pending' RETURNING queue, attempt;

-- name: schedule_fire_cancel_leased
-- The previous run's task, if it is leased: asked to cancel (?1 now, ?2 id).
UPDATE tasks SET cancel_requested = 1, updated_at = ?1
WHERE id = ?2 AND state = 'leased' RETURNING queue, attempt;

-- name: schedule_fire_run
INSERT INTO schedule_runs (schedule_id, fire_time, task_id, triggered, created_at)
VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING;

-- name: schedule_fire_mark
-- A task the run made: its schedule and fire time.
UPDATE tasks SET schedule_id = ?1, fire_time = ?2 WHERE id = ?3;

-- name: schedule_fire_holder
-- The metadata of the task holding a run's key (?1 id).
SELECT metadata FROM tasks WHERE id = ?1;

-- name: schedule_fire_run_holder
-- The key was taken: the run names the task holding it.
UPDATE schedule_runs SET task_id = ?1
WHERE schedule_id = ?2 AND fire_time = ?3;

-- name: schedule_fire_run_task
-- A run recorded before: the task it names.
SELECT task_id FROM schedule_runs WHERE schedule_id = ?1 AND fire_time = ?2;

-- name: schedule_fire_summary
UPDATE schedules SET runs = runs + ?1,
  last_fire_at = MAX(COALESCE(last_fire_at, ?2), ?2), last_task_id = ?3 WHERE id = ?4;

-- name: schedule_get
SELECT * FROM schedules WHERE id = ?;

-- name: schedule_list_head
-- Every schedule; `Schedules::schedule_list` adds the filters, the order and the limit.
SELECT * FROM schedules WHERE 1 = 1;

-- name: schedule_due
SELECT s.*, t.state IN ('pending', 'leased') AS previous_unfinished
FROM schedules s LEFT JOIN tasks t ON t.id = s.last_task_id
WHERE s.next_fire_at IS NOT NULL AND s.paused = 0 AND s.next_fire_at <= ?
ORDER BY s.next_fire_at LIMIT ?;

-- name: schedule_run_list_head
-- A schedule's runs (? its id); `Schedules::schedule_run_list` adds the page bound, the
-- order and the limit.
SELECT r.fire_time, r.task_id, r.triggered, t.state, t.run_at, t.last_error FROM schedule_runs r
LEFT JOIN tasks t ON t.id = r.task_id WHERE r.schedule_id = ?;
