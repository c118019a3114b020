-- Issue 17: pending tasks that carry a routing rule (a target, a retry reserved for
-- one worker, a copy of a distinct fan-out group). The plain lease statement asks
-- whether its queues have READY ones; only such rows have an entry, so plain tasks
-- add no index work.
CREATE INDEX tasks_routed_pending ON tasks (queue, run_at)
    WHERE state = 'pending' AND (target_worker IS NOT NULL OR target_labels IS NOT NULL
        OR reserved_for IS NOT NULL OR fanout_distinct = 1);
