-- Routing (migration 0008): the rules a lease reads of a row, the routing
-- columns a submit writes (tasks.sql), the reservation a failure leaves.

-- name: task_fail_reserve
-- A retry reserved for the worker $1 until $2 (NULL, NULL: the reservation cleared).
UPDATE tasks SET reserved_for = $1, reserved_until = $2 WHERE id = $3

-- name: task_reservation_clear
-- own: Postgres: a reserved retry is cleared by its own UPDATE; MySQL's requeue and update writes clear reserved_for in the same UPDATE
-- An admin change or requeue frees a reserved retry.
UPDATE tasks SET reserved_for = NULL, reserved_until = NULL WHERE id = $1

-- fragment: routing_may_take
-- Whether the worker of request `i` (1-based; workers $4, labels $12, now $2)
-- may take the `tasks` row at hand: its target (id, every label), a retry
-- reserved for another worker, a fan-out copy of a group this worker holds or
-- completed, a capped queue in which it has no room. Each test reads only
-- columns of the row unless the row carries that rule.
((target_worker IS NULL OR target_worker = ($4::text[])[i])
  AND (target_labels IS NULL OR target_labels::jsonb <@ ($12::text[])[i]::jsonb)
  AND (reserved_for IS NULL OR reserved_for = ($4::text[])[i] OR reserved_until <= $2)
  AND (NOT fanout_distinct OR NOT EXISTS (SELECT 1 FROM tasks c
    WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ($4::text[])[i]
      AND c.state IN ('leased', 'succeeded')))
  AND (q.cap = 0 OR EXISTS (SELECT 1 FROM room r
    WHERE r.name = q.name AND r.req = i AND r.room > 0)))

-- fragment: routing_open
-- Whether every request of the batch may take the row at hand, so it is shared
-- out by slots like any task: no target other than labels that all requests
-- carry ($13, their common labels, NULL when they differ), no reservation, no
-- distinct fan-out group, an uncapped queue.
(target_worker IS NULL
  AND (target_labels IS NULL OR target_labels::jsonb <@ $13::jsonb)
  AND reserved_for IS NULL AND NOT fanout_distinct AND q.cap = 0)

-- fragment: gated_open
-- In the gated candidate scan: a row anyone may take (no target, no
-- reservation, no distinct fan-out group), read from its own columns.
(target_worker IS NULL AND target_labels IS NULL
  AND reserved_for IS NULL AND NOT fanout_distinct)

-- fragment: gated_may_take
-- In the gated candidate scan: whether the worker of request `i` (1-based;
-- ids $7, labels $8, now $2) may take the row: its target, a retry reserved for
-- another worker, a distinct fan-out copy of a group the worker holds or
-- completed.
((target_worker IS NULL OR target_worker = ($7::text[])[i])
  AND (target_labels IS NULL OR target_labels::jsonb <@ ($8::text[])[i]::jsonb)
  AND (reserved_for IS NULL OR reserved_for = ($7::text[])[i] OR reserved_until <= $2)
  AND (NOT fanout_distinct OR NOT EXISTS (SELECT 1 FROM tasks c
      WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ($7::text[])[i]
        AND c.state IN ('leased', 'succeeded'))))
