-- name: listen_head
-- own: MySQL has no LISTEN/NOTIFY: replicas poll the event counter
SELECT n FROM event_seq WHERE id = 1

-- name: listen_events
-- own: MySQL has no LISTEN/NOTIFY: the events between two polls
SELECT event_id, queue, state FROM task_events WHERE event_id > ? AND event_id <= ?
