-- Routing (issue 13): who may lease a task, retries kept for a worker, fan-out
-- copies, and the worker registry. Times are epoch ms, as everywhere.
-- target_labels is a JSON object (text): the lease reads it with json_each only for
-- tasks that have one, so untargeted tasks cost nothing.
ALTER TABLE tasks ADD COLUMN target_worker TEXT;
ALTER TABLE tasks ADD COLUMN target_labels TEXT;
-- 'soft' or 'hard'; the SOFT reservation's length.
ALTER TABLE tasks ADD COLUMN sticky TEXT;
ALTER TABLE tasks ADD COLUMN sticky_timeout_ms INTEGER;
-- The worker a retry is reserved for, and until when (NULL: HARD, until the deadline).
ALTER TABLE tasks ADD COLUMN reserved_for TEXT;
ALTER TABLE tasks ADD COLUMN reserved_until INTEGER;
-- Copies of one fan-out task share the first copy's id.
ALTER TABLE tasks ADD COLUMN fanout_group TEXT;
ALTER TABLE tasks ADD COLUMN fanout_distinct INTEGER NOT NULL DEFAULT 0;

-- "Does this worker hold or has it completed a copy of this group?"
CREATE INDEX tasks_fanout ON tasks (fanout_group, leased_by) WHERE fanout_group IS NOT NULL;
-- Leases a worker holds (max_leases_per_worker, the worker registry).
CREATE INDEX tasks_held ON tasks (leased_by, queue) WHERE state = 'leased';

-- Every worker seen by any replica, written at most every few seconds per worker.
CREATE TABLE workers (
    worker_id  TEXT   PRIMARY KEY,
    -- JSON object and JSON array.
    labels     TEXT   NOT NULL DEFAULT '{}',
    address    TEXT   NOT NULL DEFAULT '',
    queues     TEXT   NOT NULL DEFAULT '[]',
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL
);
CREATE INDEX workers_last_seen ON workers (last_seen);
