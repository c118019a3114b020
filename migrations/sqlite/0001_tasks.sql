-- The task table and its attempts. Times are milliseconds since the Unix epoch.
-- state: pending (SCHEDULED when run_at > now, else READY), leased, succeeded, dead, cancelled.
CREATE TABLE tasks (
    seq                INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT    NOT NULL UNIQUE,
    queue              TEXT    NOT NULL,
    key                TEXT,
    payload            BLOB    NOT NULL,
    priority           INTEGER NOT NULL DEFAULT 0,
    run_at             INTEGER NOT NULL,
    deadline           INTEGER,
    state              TEXT    NOT NULL,
    attempt            INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL,
    attempts_allowed   INTEGER NOT NULL,
    initial_backoff_ms INTEGER NOT NULL,
    backoff_multiplier REAL    NOT NULL,
    max_backoff_ms     INTEGER NOT NULL,
    jitter             REAL    NOT NULL,
    metadata           TEXT    NOT NULL DEFAULT '{}',
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    last_error         TEXT,
    checkpoint         BLOB,
    result             BLOB,
    leased_by          TEXT,
    lease_token        TEXT,
    lease_duration_ms  INTEGER,
    lease_expires_at   INTEGER,
    fencing_token      INTEGER NOT NULL DEFAULT 0,
    finished_at        INTEGER,
    cancel_requested   BOOLEAN NOT NULL DEFAULT 0
);

-- Lease order among pending tasks; finished tasks are not in it.
CREATE INDEX tasks_lease ON tasks (queue, priority DESC, deadline, run_at, seq)
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
    task_id        TEXT    NOT NULL,
    attempt        INTEGER NOT NULL,
    worker_id      TEXT    NOT NULL,
    worker_address TEXT    NOT NULL,
    leased_at      INTEGER NOT NULL,
    finished_at    INTEGER,
    outcome        TEXT    NOT NULL,
    error          TEXT,
    fencing_token  INTEGER NOT NULL,
    PRIMARY KEY (task_id, attempt)
);

CREATE INDEX task_attempts_finished ON task_attempts (finished_at) WHERE finished_at IS NOT NULL;
