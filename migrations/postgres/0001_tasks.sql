-- The task table and its attempts. Times are milliseconds since the Unix epoch
-- (to_timestamp(run_at / 1000.0) reads one); the same shape as the SQLite schema.
-- state: pending (SCHEDULED when run_at > now, else READY), leased, succeeded, dead, cancelled.
CREATE TABLE tasks (
    seq                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id                 TEXT             NOT NULL UNIQUE,
    queue              TEXT             NOT NULL,
    key                TEXT,
    payload            BYTEA            NOT NULL,
    priority           BIGINT           NOT NULL DEFAULT 0,
    run_at             BIGINT           NOT NULL,
    deadline           BIGINT,
    state              TEXT             NOT NULL,
    attempt            BIGINT           NOT NULL DEFAULT 0,
    max_attempts       BIGINT           NOT NULL,
    attempts_allowed   BIGINT           NOT NULL,
    initial_backoff_ms BIGINT           NOT NULL,
    backoff_multiplier DOUBLE PRECISION NOT NULL,
    max_backoff_ms     BIGINT           NOT NULL,
    jitter             DOUBLE PRECISION NOT NULL,
    metadata           TEXT             NOT NULL DEFAULT '{}',
    created_at         BIGINT           NOT NULL,
    updated_at         BIGINT           NOT NULL,
    last_error         TEXT,
    checkpoint         BYTEA,
    result             BYTEA,
    leased_by          TEXT,
    lease_token        TEXT,
    lease_duration_ms  BIGINT,
    lease_expires_at   BIGINT,
    fencing_token      BIGINT           NOT NULL DEFAULT 0,
    finished_at        BIGINT,
    cancel_requested   BOOLEAN          NOT NULL DEFAULT FALSE
);

-- Lease order among pending tasks; finished tasks are not in it.
CREATE INDEX tasks_lease ON tasks (queue, priority DESC, deadline ASC NULLS LAST, run_at, seq)
    WHERE state = 'pending';
-- Idempotent submit.
CREATE UNIQUE INDEX tasks_queue_key ON tasks (queue, key) WHERE key IS NOT NULL;
-- The reaper's scans.
CREATE INDEX tasks_lease_expiry ON tasks (lease_expires_at) WHERE state = 'leased';
CREATE INDEX tasks_deadline ON tasks (deadline)
    WHERE deadline IS NOT NULL AND state IN ('pending', 'leased');
-- Admin listing and stats.
CREATE INDEX tasks_queue_state ON tasks (queue, state);

CREATE TABLE task_attempts (
    task_id        TEXT   NOT NULL,
    attempt        BIGINT NOT NULL,
    worker_id      TEXT   NOT NULL,
    worker_address TEXT   NOT NULL,
    leased_at      BIGINT NOT NULL,
    finished_at    BIGINT,
    outcome        TEXT   NOT NULL,
    error          TEXT,
    fencing_token  BIGINT NOT NULL,
    PRIMARY KEY (task_id, attempt)
);

CREATE INDEX task_attempts_finished ON task_attempts (finished_at) WHERE finished_at IS NOT NULL;
