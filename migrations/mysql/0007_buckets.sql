-- Limit buckets: a rate limit and a concurrency limit shared by every task
-- that names the bucket (its `taskbroker.bucket` metadata entry), in every
-- queue. `tokens`/`refilled_at` are the rate limit's token bucket, as queues'.
-- The gated lease locks the rows of the buckets it may charge.
CREATE TABLE limit_buckets (
    name VARCHAR(128) NOT NULL PRIMARY KEY,
    config MEDIUMTEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    tokens DOUBLE NOT NULL DEFAULT 0,
    refilled_at BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The queues whose tasks named a bucket themselves (TaskSpec.bucket): their
-- leases take the gated lease, which applies the bucket.
CREATE TABLE bucket_queues (
    bucket VARCHAR(128) NOT NULL,
    queue VARCHAR(255) NOT NULL,
    PRIMARY KEY (bucket, queue),
    KEY bucket_queues_queue (queue)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Cooldowns: a concurrency key of a queue (`bucket` empty) or a bucket
-- (`queue` and `ckey` empty) leases no task before `until_ms`.
CREATE TABLE cooldowns (
    queue VARCHAR(255) NOT NULL,
    ckey VARCHAR(256) NOT NULL,
    bucket VARCHAR(128) NOT NULL,
    until_ms BIGINT NOT NULL,
    task_id VARCHAR(64) NOT NULL,
    PRIMARY KEY (queue, ckey, bucket)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The NO PAD binary collation every text column shares (see migration 0005).
SET @taskbroker_nopad_bin = IF(VERSION() LIKE '%MariaDB%', 'utf8mb4_nopad_bin',
    'utf8mb4_0900_bin');

SET @taskbroker_sql = CONCAT('ALTER TABLE limit_buckets CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE bucket_queues CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE cooldowns CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;
