-- The index of leases per concurrency key holds keyed tasks only. As
-- (state, queue, concurrency_key) it was an index of every task on `state`, so
-- every lease and every settle of a task with no concurrency key (most tasks)
-- rewrote its entry: delete-marked the old, inserted the new. `keyed_state` is
-- the state of a task with a concurrency key and NULL for any other, so those
-- leases and settles leave the index as it was; the gated lease's per-key
-- counts and the key holders of QueueUsage name it. (The same rule as the
-- finished-task and fan-out indexes of migration 0010.)
--
-- One statement, so a failure leaves the table as it was. MariaDB builds the
-- index in place (writes to `tasks` wait meanwhile); MySQL 8.0 copies the
-- table, since it adds a virtual column in place only alone (docs/migrating.md).
ALTER TABLE tasks
    ADD COLUMN keyed_state VARCHAR(16) GENERATED ALWAYS AS
        (CASE WHEN concurrency_key IS NOT NULL THEN state END) VIRTUAL,
    DROP INDEX tasks_leased_key,
    ADD INDEX tasks_leased_key (keyed_state, queue, concurrency_key);
