-- The whole schema of the MySQL/MariaDB store (MySQL 8.0+, MariaDB 10.6+), in one
-- migration: the tables and indexes of the SQLite and Postgres stores' migrations
-- 0001-0016 as they stand. Times are milliseconds since the Unix epoch (BIGINT), as
-- in the other stores. Text compares byte for byte (utf8mb4_bin), as it does there.
-- MySQL has no partial indexes: the indexes below are whole-table ones on the same
-- columns, led by `state` where the other stores filter on it.

CREATE TABLE tasks (
    seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id VARCHAR(64) NOT NULL,
    queue VARCHAR(255) NOT NULL,
    `key` VARCHAR(512) NULL,
    payload LONGBLOB NOT NULL,
    priority BIGINT NOT NULL DEFAULT 0,
    run_at BIGINT NOT NULL,
    deadline BIGINT NULL,
    state VARCHAR(16) NOT NULL,
    attempt BIGINT NOT NULL DEFAULT 0,
    max_attempts BIGINT NOT NULL,
    attempts_allowed BIGINT NOT NULL,
    initial_backoff_ms BIGINT NOT NULL,
    backoff_multiplier DOUBLE NOT NULL,
    max_backoff_ms BIGINT NOT NULL,
    jitter DOUBLE NOT NULL,
    metadata MEDIUMTEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    last_error TEXT NULL,
    checkpoint LONGBLOB NULL,
    result LONGBLOB NULL,
    leased_by VARCHAR(256) NULL,
    lease_token VARCHAR(64) NULL,
    lease_duration_ms BIGINT NULL,
    lease_expires_at BIGINT NULL,
    fencing_token BIGINT NOT NULL DEFAULT 0,
    finished_at BIGINT NULL,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    leased_at BIGINT NULL,
    leased_address VARCHAR(512) NULL,
    schedule_id VARCHAR(255) NULL,
    fire_time BIGINT NULL,
    target_worker VARCHAR(256) NULL,
    target_labels TEXT NULL,
    sticky VARCHAR(16) NULL,
    sticky_timeout_ms BIGINT NULL,
    reserved_for VARCHAR(256) NULL,
    reserved_until BIGINT NULL,
    fanout_group VARCHAR(255) NULL,
    fanout_distinct BOOLEAN NOT NULL DEFAULT FALSE,
    concurrency_key VARCHAR(256) NULL,
    deps_remaining BIGINT NOT NULL DEFAULT 0,
    run_if_dependency_fails BOOLEAN NOT NULL DEFAULT FALSE,
    cancel_reason VARCHAR(32) NULL,
    retry_schedule TEXT NULL,
    has_dependents BOOLEAN NOT NULL DEFAULT FALSE,
    -- The lease order's deadline (none last), so one index serves the ORDER BY.
    lease_deadline BIGINT AS (COALESCE(deadline, 9223372036854775807)) STORED,
    -- The dead-letter groups of the console hash the error (Postgres: error_hash).
    error_hash BIGINT AS (CASE WHEN state = 'dead'
        THEN CAST(CONV(LEFT(SHA2(COALESCE(last_error, ''), 256), 15), 16, 10) AS SIGNED)
        END) STORED,
    UNIQUE KEY tasks_id (id),
    UNIQUE KEY tasks_queue_key (queue, `key`),
    KEY tasks_lease (state, queue, priority DESC, lease_deadline, run_at, seq),
    KEY tasks_lease_expiry (state, lease_expires_at),
    KEY tasks_leased (state, queue, leased_by),
    KEY tasks_leased_key (state, queue, concurrency_key),
    KEY tasks_deadline (deadline),
    KEY tasks_created (created_at, seq),
    KEY tasks_queue_state (queue, state, finished_at),
    KEY tasks_finished (state, finished_at),
    KEY tasks_dead_error (queue, error_hash, finished_at),
    KEY tasks_fanout (fanout_group, leased_by),
    KEY tasks_schedule (schedule_id, seq),
    KEY tasks_worker (leased_by)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE task_attempts (
    task_id VARCHAR(64) NOT NULL,
    attempt BIGINT NOT NULL,
    worker_id VARCHAR(256) NOT NULL,
    worker_address VARCHAR(512) NOT NULL,
    leased_at BIGINT NOT NULL,
    finished_at BIGINT NULL,
    outcome VARCHAR(32) NOT NULL,
    error TEXT NULL,
    fencing_token BIGINT NOT NULL,
    PRIMARY KEY (task_id, attempt),
    KEY task_attempts_finished (finished_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE schedules (
    id VARCHAR(255) NOT NULL PRIMARY KEY,
    spec TEXT NOT NULL,
    start_time BIGINT NULL,
    end_time BIGINT NULL,
    template MEDIUMTEXT NOT NULL,
    payload LONGBLOB NOT NULL,
    overlap VARCHAR(32) NOT NULL,
    misfire VARCHAR(32) NOT NULL,
    catchup_window_ms BIGINT NOT NULL,
    paused BOOLEAN NOT NULL DEFAULT FALSE,
    max_runs BIGINT NOT NULL DEFAULT 0,
    next_spec_at BIGINT NULL,
    buffered_at BIGINT NULL,
    next_fire_at BIGINT NULL,
    last_fire_at BIGINT NULL,
    last_task_id VARCHAR(64) NULL,
    runs BIGINT NOT NULL DEFAULT 0,
    state_reason TEXT NULL,
    created_by VARCHAR(255) NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    version BIGINT NOT NULL DEFAULT 0,
    KEY schedules_due (paused, next_fire_at),
    KEY schedules_created_by (created_by, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE schedule_runs (
    schedule_id VARCHAR(255) NOT NULL,
    fire_time BIGINT NOT NULL,
    task_id VARCHAR(64) NOT NULL,
    triggered BOOLEAN NOT NULL DEFAULT FALSE,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (schedule_id, fire_time)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE workers (
    worker_id VARCHAR(256) NOT NULL PRIMARY KEY,
    labels TEXT NOT NULL,
    address VARCHAR(512) NOT NULL DEFAULT '',
    queues TEXT NOT NULL,
    first_seen BIGINT NOT NULL,
    last_seen BIGINT NOT NULL,
    -- Whether the latest write named queues (a Heartbeat names none and keeps them).
    queues_given BOOLEAN NOT NULL DEFAULT FALSE,
    KEY workers_last_seen (last_seen)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE queues (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    config MEDIUMTEXT NOT NULL,
    updated_at BIGINT NULL,
    version BIGINT NOT NULL DEFAULT 0,
    tokens DOUBLE NOT NULL DEFAULT 0,
    refilled_at BIGINT NOT NULL DEFAULT 0,
    served BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE queue_key_tokens (
    queue VARCHAR(255) NOT NULL,
    `key` VARCHAR(256) NOT NULL,
    tokens DOUBLE NOT NULL,
    refilled_at BIGINT NOT NULL,
    PRIMARY KEY (queue, `key`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE queue_key_turns (
    queue VARCHAR(255) NOT NULL,
    `key` VARCHAR(256) NOT NULL,
    served BIGINT NOT NULL,
    PRIMARY KEY (queue, `key`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE queue_dead_letters (
    queue VARCHAR(255) NOT NULL PRIMARY KEY,
    dead_letter_queue VARCHAR(255) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE task_deps (
    depends_on VARCHAR(64) NOT NULL,
    task_id VARCHAR(64) NOT NULL,
    resolved BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (depends_on, task_id),
    KEY task_deps_task (task_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Event ids come from `event_seq`, taken as the last statement of the transaction
-- that records them: its row lock is held until commit, so ids commit in order
-- and every committed event is final for readers (see store/mysql/events.rs).
CREATE TABLE task_events (
    event_id BIGINT NOT NULL PRIMARY KEY,
    task_id VARCHAR(64) NOT NULL,
    queue VARCHAR(255) NOT NULL,
    kind VARCHAR(32) NOT NULL,
    state VARCHAR(16) NOT NULL,
    attempt BIGINT NOT NULL,
    worker_id VARCHAR(256) NULL,
    `time` BIGINT NOT NULL,
    detail TEXT NULL,
    KEY task_events_task (task_id, event_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE event_seq (
    id TINYINT NOT NULL PRIMARY KEY,
    n BIGINT NOT NULL
) ENGINE = InnoDB;
INSERT INTO event_seq (id, n) VALUES (1, 0);
