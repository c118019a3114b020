-- name: key_waits_named
-- The metadata of a task a dependent names (?1 id), for its producer.
SELECT metadata FROM tasks WHERE id = ?1;

-- name: key_waits_holder
-- The task holding a key (?1 queue, ?2 key), with its metadata.
SELECT id, metadata FROM tasks WHERE queue = ?1 AND key = ?2;

-- name: key_waits_count
-- The unbound waits of a key per producer, up to ?4.
SELECT count(*) FROM (SELECT 1 FROM task_key_deps
WHERE queue = ?1 AND key = ?2 AND producer IS ?3 AND bound_to IS NULL
LIMIT ?4);

-- name: key_waits_insert
INSERT INTO task_key_deps (task_id, queue, key, bound_to, producer)
VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING;
