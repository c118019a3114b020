-- Keep the lease on its ordered index. With (queue, state) covering pending rows,
-- the planner (on young or stale statistics) could read every pending row of a
-- queue through it and sort them for each Lease: a cost that grows with the
-- backlog and with not-yet-vacuumed churn. Pending rows are counted and listed
-- through tasks_lease (queue first) instead, so this index leaves them out.
DROP INDEX tasks_queue_state;
CREATE INDEX tasks_queue_state ON tasks (queue, state) WHERE state <> 'pending';

-- A task table churns: every task is updated two or three times within seconds.
-- Vacuum and analyze it after 2% changes instead of 20% (the defaults), and
-- without the cost-based pause, so dead index entries and statistics keep up.
ALTER TABLE tasks SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE task_attempts SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
