-- Admission (#14): live queue settings, concurrency keys and rate-limit buckets.
--
-- A task's concurrency key; leased tasks are counted per (queue, key) through
-- tasks_leased_key (per queue through tasks_queue_state), under the queue row's lock (see store/postgres/admission.rs).
ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;
-- Only tasks with a key are in it: leasing and settling tasks without one (every
-- task of a queue without per-key limits, as a rule) costs no index write.
CREATE INDEX tasks_leased_key ON tasks (queue, concurrency_key)
    WHERE state = 'leased' AND concurrency_key IS NOT NULL;

-- One row per queue with stored settings: `config` is the queue's settings as
-- JSON (fields left out follow the broker's defaults). The row also holds the
-- queue's rate-limit bucket; a gated lease locks it, which serialises the gated
-- leases of one queue across replicas.
CREATE TABLE queues (
    name        TEXT             PRIMARY KEY,
    config      TEXT             NOT NULL,
    -- When an operator last changed it; NULL while it is the configuration's seed.
    updated_at  BIGINT,
    -- Bumped by every change: UpdateQueue writes only over the version it read.
    version     BIGINT           NOT NULL DEFAULT 0,
    tokens      DOUBLE PRECISION NOT NULL DEFAULT 0,
    refilled_at BIGINT           NOT NULL DEFAULT 0
);

-- Per-key rate-limit buckets; a row absent is a full bucket.
CREATE TABLE queue_key_tokens (
    queue       TEXT             NOT NULL,
    key         TEXT             NOT NULL,
    tokens      DOUBLE PRECISION NOT NULL,
    refilled_at BIGINT           NOT NULL,
    PRIMARY KEY (queue, key)
);
