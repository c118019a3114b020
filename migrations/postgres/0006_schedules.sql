-- Schedules (cron, interval, one-off) and their run history. Times are epoch ms.
-- spec and template are JSON written by the broker (domain::schedule); payload
-- is kept apart as bytes.
CREATE TABLE schedules (
    id               TEXT    PRIMARY KEY,
    spec             TEXT    NOT NULL,
    start_time       BIGINT,
    end_time         BIGINT,
    template         TEXT    NOT NULL,
    payload          BYTEA   NOT NULL,
    overlap          TEXT    NOT NULL,
    misfire          TEXT    NOT NULL,
    catchup_window_ms BIGINT NOT NULL,
    paused           BOOLEAN NOT NULL DEFAULT FALSE,
    max_runs         BIGINT  NOT NULL DEFAULT 0,
    -- The first spec fire time not yet handled; NULL when the spec has no more.
    next_spec_at     BIGINT,
    -- A fire time kept for BUFFER_ONE until the previous run's task finishes.
    buffered_at      BIGINT,
    -- When the scheduler must look at the schedule next (NULL: never again).
    next_fire_at     BIGINT,
    last_fire_at     BIGINT,
    last_task_id     TEXT,
    runs             BIGINT  NOT NULL DEFAULT 0,
    state_reason     TEXT,
    created_by       TEXT,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    -- Bumped by every write: a fire computed from an older read changes nothing.
    version          BIGINT  NOT NULL DEFAULT 0
);
-- The scheduler reads only the schedules due (cost grows with those, not with all).
CREATE INDEX schedules_due ON schedules (next_fire_at)
    WHERE next_fire_at IS NOT NULL AND NOT paused;
CREATE INDEX schedules_created_by ON schedules (created_by, id) WHERE created_by IS NOT NULL;

-- One row per fire time that made a task: the key makes each fire time fire once.
-- It outlives task retention (the task may be gone; the run stays).
CREATE TABLE schedule_runs (
    schedule_id TEXT    NOT NULL,
    fire_time   BIGINT  NOT NULL,
    task_id     TEXT    NOT NULL,
    triggered   BOOLEAN NOT NULL DEFAULT FALSE,
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (schedule_id, fire_time)
);

ALTER TABLE tasks ADD COLUMN schedule_id TEXT;
ALTER TABLE tasks ADD COLUMN fire_time BIGINT;
CREATE INDEX tasks_schedule ON tasks (schedule_id, seq) WHERE schedule_id IS NOT NULL;
