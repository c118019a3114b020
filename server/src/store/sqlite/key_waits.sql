-- name: key_waits_named
-- own: SQLite's one writer takes no row locks, so a dependency named is read plainly for its producer
-- The metadata of a task a dependent names (?1 id), for its producer.
SELECT metadata FROM tasks WHERE id = ?1;

-- name: key_waits_holders
-- The task holding a key (?1 queue, ?2 key), with its metadata.
SELECT id, metadata FROM tasks WHERE queue = ?1 AND key = ?2;

-- name: key_waits_count
-- The unbound waits of a key per producer, up to ?4.
SELECT count(*) FROM (SELECT 1 FROM task_key_deps
WHERE queue = ?1 AND key = ?2 AND producer IS ?3 AND bound_to IS NULL
LIMIT ?4);
