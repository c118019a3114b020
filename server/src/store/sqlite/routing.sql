-- name: routing_write
-- own: SQLite writes a new task's routing columns in an UPDATE after its insert, where Postgres and MySQL insert them with the row
-- The routing columns of a task just inserted (?7 its id).
UPDATE tasks SET target_worker = ?1, target_labels = ?2, sticky = ?3,
  sticky_timeout_ms = ?4, fanout_group = ?5, fanout_distinct = ?6 WHERE id = ?7;

-- name: task_fail_reserve
-- A retry kept for a worker (?1 worker or NULL, ?2 until, ?3 seq).
UPDATE tasks SET reserved_for = ?1, reserved_until = ?2 WHERE seq = ?3;

-- name: task_reservation_clear
-- own: SQLite: a reserved retry is cleared by its own UPDATE; MySQL's requeue and update writes clear reserved_for in the same UPDATE
-- Frees a retry reserved for a worker (?1 seq).
UPDATE tasks SET reserved_for = NULL, reserved_until = NULL WHERE seq = ?1;

-- name: routing_worker_held
-- own: SQLite's plain lease checks a worker's per-queue cap per request in the broker, where Postgres's lease counts it inside its one statement
-- The leases worker ?1 holds in queue ?2 (through `tasks_leased`).
SELECT count(*) FROM tasks WHERE state = 'leased'
AND leased_by = ?1 AND queue = ?2;

-- fragment: routing_may_take
-- Whether the worker of the lease at hand may take the `tasks` row at hand: ?1
-- is its id, ?4 now, ?3 its labels (a JSON object). An untargeted task with no
-- reservation and no distinct fan-out group passes at the first test, reading
-- only its own columns.
((target_worker IS NULL AND target_labels IS NULL
    AND reserved_for IS NULL AND fanout_distinct = 0)
  OR ((target_worker IS NULL OR target_worker = ?1)
    AND (target_labels IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(tasks.target_labels) j
      WHERE j.value IS NOT (SELECT w.value FROM json_each(?3) w WHERE w.key = j.key)))
    AND (reserved_for IS NULL OR reserved_for = ?1 OR reserved_until <= ?4)
    AND (fanout_distinct = 0 OR NOT EXISTS (SELECT 1 FROM tasks c
      WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ?1
        AND c.state IN ('leased', 'succeeded')))))
