-- Fewer index entries per task. InnoDB writes a secondary index entry again
-- (delete-marks the old one, inserts the new) only when one of the index's
-- columns changes; a lease changes `state`, `leased_by` and `lease_expires_at`,
-- a settle `state`, `finished_at` and `lease_expires_at`. MySQL has no partial
-- indexes, so an index that held one kind of task was an index of every task
-- on the columns these writes change. Each index below is either dropped, its
-- readers served by another with the same work, or put on a virtual generated
-- column that is NULL for the tasks it does not hold, so that a lease (and a
-- non-final settle) leaves it as it was:
--
-- - tasks_lease_expiry (state, lease_expires_at): read by the reaper only, and
--   written by every lease, settle and lease extension. The reaper reads the
--   leases in flight through the `state` prefix of tasks_lease (or
--   tasks_leased), each one's expiry from its row, as Postgres does.
-- - tasks_worker (leased_by): a worker's leases (the registry's counts, a
--   worker's page) are the leases in flight, read through tasks_leased;
--   ListTasks by worker reads tasks_created, newest first, as on Postgres.
-- - tasks_dead_error (queue, error_hash, finished_at): the dead-letter groups
--   read every dead task of their scope, through the `state` prefix of
--   tasks_lease (the same rows; the grouping sorts them).
-- - tasks_finished and tasks_queue_state: `finished_state` is the state of a
--   finished task and NULL otherwise, so a lease and a retry leave both as they
--   were; the fold, the counts and retention name it. Queue-and-state reads of
--   live or dead tasks (admission's waiting count, the bulk dead-letter picks,
--   lists) read the `(state, queue)` prefix of tasks_lease.
-- - tasks_fanout: `fanout_leased_by` is the worker of a fan-out copy and NULL
--   for any other task, so a lease of a task of no fan-out group leaves it as
--   it was; the routing test of a distinct group names it.
--
-- One statement, so a failure leaves the table as it was. MariaDB builds the new
-- indexes in place (writes to `tasks` wait meanwhile); MySQL 8.0 copies the table,
-- since it adds a virtual column in place only alone (docs/migrating.md).
ALTER TABLE tasks
    ADD COLUMN finished_state VARCHAR(16) GENERATED ALWAYS AS
        (CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN state END) VIRTUAL,
    ADD COLUMN fanout_leased_by VARCHAR(256) GENERATED ALWAYS AS
        (CASE WHEN fanout_group IS NOT NULL THEN leased_by END) VIRTUAL,
    DROP INDEX tasks_lease_expiry,
    DROP INDEX tasks_worker,
    DROP INDEX tasks_dead_error,
    DROP INDEX tasks_finished,
    ADD INDEX tasks_finished (finished_state, finished_at),
    DROP INDEX tasks_queue_state,
    ADD INDEX tasks_queue_state (queue, finished_state, finished_at),
    DROP INDEX tasks_fanout,
    ADD INDEX tasks_fanout (fanout_group, fanout_leased_by);
