-- Tasks are found by id; `seq` only orders them (the last key of the lease order
-- and of the creation-time index), and no statement looks a task up by `seq`.
-- The unique index on it was the primary key: every new row version, and a lease
-- and a settle each write one (they change `state`, so they are never HOT updates),
-- added an entry to it, three of the fifteen to eighteen WAL records of a task's
-- life. The unique index on id, which every lookup uses, identifies a row for
-- logical replication instead (no index is built here).
ALTER TABLE tasks DROP CONSTRAINT tasks_pkey;
ALTER TABLE tasks REPLICA IDENTITY USING INDEX tasks_id_key;
