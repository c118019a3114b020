-- Schedules: the rows, their fires and their runs.

-- name: schedule_insert
INSERT INTO schedules (id, spec, start_time, end_time, template, payload, overlap,
  misfire, catchup_window_ms, paused, max_runs, next_spec_at, buffered_at,
  next_fire_at, state_reason, created_by, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17)
ON CONFLICT (id) DO NOTHING

-- name: schedule_get
SELECT * FROM schedules WHERE id = $1

-- name: schedule_list_head
-- The start of the list; the filters and the page follow (schedules.rs).
SELECT * FROM schedules WHERE 1 = 1

-- name: schedule_update
-- Conditional on the version read ($17).
UPDATE schedules SET spec = $2, start_time = $3, end_time = $4, template = $5,
  payload = $6, overlap = $7, misfire = $8, catchup_window_ms = $9, paused = $10,
  max_runs = $11, next_spec_at = $12, buffered_at = $13, next_fire_at = $14,
  state_reason = $15, updated_at = $16, version = version + 1
WHERE id = $1 AND version = $17

-- name: schedule_delete_runs
DELETE FROM schedule_runs WHERE schedule_id = $1

-- name: schedule_delete
DELETE FROM schedules WHERE id = $1

-- name: schedule_due
SELECT s.*, t.state IN ('pending', 'leased') AS previous_unfinished
FROM schedules s LEFT JOIN tasks t ON t.id = s.last_task_id
WHERE s.next_fire_at IS NOT NULL AND NOT s.paused AND s.next_fire_at <= $1
ORDER BY s.next_fire_at LIMIT $2

-- name: schedule_fire_cursor
-- The cursor moves only from the version read ($7).
UPDATE schedules SET next_spec_at = $1, buffered_at = $2, next_fire_at = $3,
  state_reason = $4, updated_at = $5, version = version + 1
WHERE id = $6 AND version = $7

-- name: schedule_fire_cancel
-- The previous run's task, still pending, cancelled at $1, with its CANCELLED event.
WITH u AS (UPDATE tasks t SET state = 'cancelled', finished_at = $1, updated_at = $1
  WHERE id = $2 AND state = 'pending' RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'cancelled'::text,
  CASE WHEN state = 'pending' AND run_at > $1 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($1)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: schedule_fire_cancel_leased
-- The previous run's task, leased: asked to cancel, with its UPDATED event.
WITH u AS (UPDATE tasks t SET cancel_requested = TRUE, updated_at = $1
  WHERE id = $2 AND state = 'leased' RETURNING t.id, t.queue, t.state, t.attempt, t.run_at)
${event_batch} SELECT id, queue, 'updated'::text,
  CASE WHEN state = 'pending' AND run_at > $1 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($1)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: schedule_fire_run
-- The run row, keyed by (schedule_id, fire_time): a second fire of it writes nothing.
INSERT INTO schedule_runs (schedule_id, fire_time, task_id, triggered, created_at)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING

-- name: schedule_fire_task
-- own: Postgres inserts a fired task with its SUBMITTED event in one statement, with a data-modifying CTE
-- One plain task of a run, schedule columns included, with its SUBMITTED event.
WITH u AS (INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state,
  max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier,
  max_backoff_ms, jitter, metadata, created_at, updated_at, schedule_id, fire_time,
  waiting)
  VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $8, $9, $10, $11, $12, $13, $14,
  $14, $15, $16, $6 > $14) RETURNING id, queue, state, attempt, run_at)
${event_batch} SELECT id, queue, 'submitted'::text,
  CASE WHEN state = 'pending' AND run_at > $14 THEN 'scheduled'
       WHEN state = 'pending' THEN 'ready' ELSE state END,
  attempt, NULL::text, ($14)::bigint, (NULL)::text FROM u${event_batch_end}

-- name: schedule_fire_mark
-- The schedule columns of the tasks a run inserted through the submit statement.
UPDATE tasks SET schedule_id = $1, fire_time = $2
WHERE id = ANY($3::text[])

-- name: schedule_fire_holder
-- The metadata of the task that holds a run's key.
SELECT metadata FROM tasks WHERE id = $1

-- name: schedule_fire_run_holder
UPDATE schedule_runs SET task_id = $1
WHERE schedule_id = $2 AND fire_time = $3

-- name: schedule_fire_run_task
SELECT task_id FROM schedule_runs WHERE schedule_id = $1 AND fire_time = $2

-- name: schedule_fire_summary
UPDATE schedules SET runs = runs + $1,
  last_fire_at = GREATEST(COALESCE(last_fire_at, $2), $2), last_task_id = $3
WHERE id = $4

-- piece: schedule_run_list_head
-- The start of the list; $1 the schedule, then the page (schedules.rs).
SELECT r.fire_time, r.task_id, r.triggered, t.state, t.run_at, t.last_error FROM schedule_runs r
LEFT JOIN tasks t ON t.id = r.task_id WHERE r.schedule_id =
