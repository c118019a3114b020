-- name: key_waits_lock_shared
-- own: MySQL orders key waits and binds on the one-row key_deps_lock
-- Every keyed insert holds it shared until it commits.
SELECT id FROM key_deps_lock WHERE id = 1 LOCK IN SHARE MODE

-- name: key_waits_bind
-- own: MySQL binds key waits in the broker (a trigger needs SUPER under binary logging)
UPDATE task_key_deps SET bound_to = ?
WHERE queue = ? AND `key` = ? AND producer <=> ? AND bound_to IS NULL

-- name: key_waits_edges
-- own: MySQL binds key waits in the broker (a trigger needs SUPER under binary logging)
-- The edges of the waits just bound, resolved like any other.
INSERT IGNORE INTO task_deps (depends_on, task_id, resolved)
SELECT ?, task_id, FALSE FROM task_key_deps
WHERE queue = ? AND `key` = ? AND producer <=> ? AND bound_to = ?

-- name: key_waits_count
-- The unbound waits of a (queue, key) of one producer, up to the cap.
SELECT count(*) FROM (SELECT 1 FROM task_key_deps
WHERE queue = ? AND `key` = ? AND producer <=> ? AND bound_to IS NULL LIMIT ?) w

-- name: key_waits_holders
-- The task holding a key a dependent names.
SELECT id, metadata FROM tasks WHERE queue = ? AND `key` = ?
