-- Admission (#14): live queue settings, concurrency keys and rate-limit buckets.
--
-- A task's concurrency key; leased tasks are counted per (queue, key) through
-- tasks_leased_key (per queue through tasks_queue_state), under the one writer (see store/sqlite/admission.rs).
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;
-- Only tasks with a key are in it: leasing and settling tasks without one (every
-- task of a queue without per-key limits, as a rule) costs no index write.
CREATE INDEX tasks_leased_key ON tasks (queue, concurrency_key)
    WHERE state = 'leased' AND concurrency_key IS NOT NULL;

-- One row per queue with stored settings: `config` is the queue's settings as
-- JSON (fields left out follow the broker's defaults). The row also holds the
-- queue's rate-limit bucket (SQLite has one writer, which serialises leases).
CREATE TABLE queues (
    name        TEXT             PRIMARY KEY,
    config      TEXT             NOT NULL,
    -- When an operator last changed it; NULL while it is the configuration's seed.
    updated_at  INTEGER,
    -- Bumped by every change: UpdateQueue writes only over the version it read.
    version     INTEGER          NOT NULL DEFAULT 0,
    tokens      REAL             NOT NULL DEFAULT 0,
    refilled_at INTEGER          NOT NULL DEFAULT 0
);

-- Per-key rate-limit buckets; a row absent is a full bucket.
CREATE TABLE queue_key_tokens (
    queue       TEXT             NOT NULL,
    key         TEXT             NOT NULL,
    tokens      REAL             NOT NULL,
    refilled_at INTEGER          NOT NULL,
    PRIMARY KEY (queue, key)
);
