-- Limit buckets: a rate limit and a concurrency limit shared by every task
-- that names the bucket (its `taskbroker.bucket` metadata entry), in every
-- queue. `tokens`/`refilled_at` are the rate limit's token bucket, as queues'.
-- The gated lease locks the rows of the buckets it may charge.
CREATE TABLE limit_buckets (
    name        TEXT             PRIMARY KEY,
    config      TEXT             NOT NULL,
    updated_at  INTEGER          NOT NULL,
    tokens      REAL             NOT NULL DEFAULT 0,
    refilled_at INTEGER           NOT NULL DEFAULT 0
);

-- The queues whose tasks named a bucket themselves (TaskSpec.bucket): their
-- leases take the gated lease, which applies the bucket.
CREATE TABLE bucket_queues (
    bucket TEXT NOT NULL,
    queue  TEXT NOT NULL,
    PRIMARY KEY (bucket, queue)
);
CREATE INDEX bucket_queues_queue ON bucket_queues (queue);

-- Cooldowns: a concurrency key of a queue (`bucket` empty) or a bucket
-- (`queue` and `ckey` empty) leases no task before `until_ms`.
CREATE TABLE cooldowns (
    queue    TEXT   NOT NULL,
    ckey     TEXT   NOT NULL,
    bucket   TEXT   NOT NULL,
    until_ms INTEGER NOT NULL,
    task_id  TEXT   NOT NULL,
    PRIMARY KEY (queue, ckey, bucket)
);
