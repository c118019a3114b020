-- fragment: routing_may_take
-- Whether the worker of the lease at hand may take the `tasks` row at hand:
-- binds, in order, its id, its labels (a JSON object), its id, now, its id.
-- An untargeted task with no reservation and no distinct fan-out group passes
-- at the first test, reading only its own columns.
((target_worker IS NULL AND target_labels IS NULL
    AND reserved_for IS NULL AND NOT fanout_distinct)
  OR ((target_worker IS NULL OR target_worker = ?)
    AND (target_labels IS NULL OR JSON_CONTAINS(?, target_labels))
    AND (reserved_for IS NULL OR reserved_for = ? OR reserved_until <= ?)
    AND (NOT fanout_distinct OR NOT EXISTS (SELECT 1 FROM tasks c
      WHERE c.fanout_group = tasks.fanout_group AND c.fanout_leased_by = ?
        AND c.state IN ('leased', 'succeeded')))))

-- name: task_fail_reserve
-- The retry kept for the worker that failed it (or an older reservation cleared).
UPDATE tasks SET reserved_for = ?, reserved_until = ? WHERE seq = ?

-- name: routing_worker_held
-- own: MySQL's leases check a worker's per-queue cap per request in the broker, where Postgres's lease counts it inside its one statement
-- The leases a worker holds on a queue (its per-worker cap).
SELECT count(*) FROM tasks WHERE state = 'leased' AND queue = ?
AND leased_by = ?

-- name: routing_holds_copy
-- own: MySQL takes no array parameter, so the gated lease checks a distinct fan-out copy per candidate and worker in the broker
-- Whether a worker holds or completed a copy of a distinct fan-out group.
SELECT 1 FROM tasks WHERE fanout_group = ? AND fanout_leased_by = ?
AND state IN ('leased', 'succeeded') LIMIT 1

-- piece: routing_workers_add_head
-- own: MySQL serializes a worker's leases on its lease_workers row
-- Followed by VALUES and one `(?)` per worker.
INSERT IGNORE INTO lease_workers (worker_id)

-- piece: routing_workers_lock_head
-- own: MySQL serializes a worker's leases on its lease_workers row
-- Followed by one placeholder per worker, then `) ORDER BY worker_id FOR UPDATE`.
SELECT worker_id FROM lease_workers WHERE worker_id IN (
