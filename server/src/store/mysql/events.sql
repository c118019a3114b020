-- name: event_list
SELECT event_id, task_id, queue, kind, state, attempt, worker_id, `time`, detail
FROM task_events WHERE task_id = ? AND event_id > ? ORDER BY event_id LIMIT ?

-- name: event_read
SELECT event_id, task_id, queue, kind, state, attempt, worker_id, `time`, detail
FROM task_events WHERE event_id > ? ORDER BY event_id LIMIT ?

-- name: event_head
-- own: MySQL's event ids come from the one-row counter event_seq, so its value is the head
SELECT n FROM event_seq WHERE id = 1

-- name: event_purge_pick
-- own: MySQL takes no LIMIT in an IN subquery of the table it deletes from, so the purge picks the ids first and deletes their range
-- Of the oldest `limit` events by id, those older than `before` (ids grow with
-- time). Picking the oldest `limit` of those older than `before` instead reads
-- every event when none is that old yet, on every pass.
SELECT event_id FROM (SELECT event_id, `time` FROM task_events ORDER BY event_id LIMIT ?) o
WHERE `time` < ? ORDER BY event_id

-- name: event_purge
DELETE FROM task_events WHERE event_id <= ? AND event_id >= ? AND `time` < ?

-- piece: event_write_waited_on_head
-- own: MySQL resolves dependents in the broker (its triggers cannot change their own table)
-- The finished tasks of a job that have unresolved dependents; followed by
-- one placeholder per task and `)`.
SELECT DISTINCT depends_on FROM task_deps WHERE NOT resolved AND depends_on IN (

-- name: event_write_take_ids
-- own: MySQL's event ids come from the one-row counter event_seq
-- Takes the job's ids; LAST_INSERT_ID(expr) comes back in the statement's answer.
UPDATE event_seq SET n = LAST_INSERT_ID(n + ?) WHERE id = 1

-- piece: event_write_insert_head
-- own: MySQL writes a job's events in multi-row INSERTs cut to its packet
-- Followed by one event_write_insert_row per event, comma separated.
INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt,
worker_id, `time`, detail) VALUES

-- piece: event_write_insert_row
-- own: MySQL writes a job's events in multi-row INSERTs cut to its packet
(?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: event_write_dead_letter_queue
-- own: MySQL files dead-letter notices in the broker
SELECT dead_letter_queue FROM queue_dead_letters
WHERE queue = ? AND dead_letter_queue <> ?

-- name: event_write_dead_task
-- own: MySQL files dead-letter notices in the broker
SELECT `key`, attempt, last_error FROM tasks WHERE id = ?

-- name: event_write_dependents
-- own: MySQL resolves dependents in the broker
SELECT d.task_id, t.state, t.run_if_dependency_fails, t.queue, t.attempt
FROM task_deps d JOIN tasks t ON t.id = d.task_id
WHERE d.depends_on = ? AND NOT d.resolved FOR UPDATE

-- name: event_write_resolve
-- own: MySQL resolves dependents in the broker
UPDATE task_deps SET resolved = TRUE WHERE depends_on = ? AND NOT resolved

-- name: event_write_count_off
-- own: MySQL resolves dependents in the broker
-- One dependency counted off; the last one unblocks.
UPDATE tasks SET state = CASE WHEN deps_remaining <= 1 THEN 'pending'
  ELSE state END, deps_remaining = deps_remaining - 1, updated_at = ?
WHERE id = ? AND state = 'blocked'

-- name: event_write_unblocked
-- own: MySQL resolves dependents in the broker
SELECT state, run_at FROM tasks WHERE id = ?

-- name: event_write_cancel_dependent
-- own: MySQL resolves dependents in the broker
UPDATE tasks SET state = 'cancelled', cancel_reason = 'dependency_failed',
  last_error = 'DEPENDENCY_FAILED', finished_at = ?, updated_at = ?
WHERE id = ? AND state = 'blocked'
