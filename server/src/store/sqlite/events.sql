-- name: event_insert
-- own: SQLite writes a job's events one row each, through one cached INSERT on the writer
-- One event row; a job's events are written with this row repeated (`events::write`).
INSERT INTO task_events (task_id, queue, kind, state, attempt, worker_id, time, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: event_list
SELECT ${event_columns}
FROM task_events WHERE task_id = ? AND event_id > ? ORDER BY event_id LIMIT ?;

-- name: event_read
SELECT ${event_columns}
FROM task_events WHERE event_id > ? ORDER BY event_id LIMIT ?;

-- name: event_head
-- own: SQLite's one writer hands out event ids in commit order, so the largest id is the head
-- Retention never deletes the newest event, so this is the largest id used.
SELECT max(event_id) FROM task_events;

-- name: event_purge
-- Ids grow with time: the oldest ?2 by id, those older than ?1, never the
-- newest (its id is where the next one starts).
DELETE FROM task_events WHERE event_id IN (
  SELECT event_id FROM (SELECT event_id, time FROM task_events
    ORDER BY event_id LIMIT ?2) WHERE time < ?1)
AND event_id < (SELECT max(event_id) FROM task_events);

-- fragment: event_columns
event_id, task_id, queue, kind, state, attempt, worker_id, time, detail
