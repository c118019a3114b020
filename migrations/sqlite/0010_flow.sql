-- Flow (#15): task dependencies, the event log, dead-letter notices, retry schedules.
-- The same shape as the Postgres migration. No triggers: every write job records
-- the events of its transitions in its own savepoint (store/sqlite/events.rs),
-- and tells the dependents of tasks it finished and files dead-letter notices
-- there too (store/sqlite/flow.rs).
ALTER TABLE tasks ADD COLUMN deps_remaining INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN run_if_dependency_fails BOOLEAN NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN cancel_reason TEXT;
ALTER TABLE tasks ADD COLUMN retry_schedule TEXT;

CREATE TABLE task_deps (
    depends_on TEXT    NOT NULL,
    task_id    TEXT    NOT NULL,
    resolved   BOOLEAN NOT NULL DEFAULT 0,
    PRIMARY KEY (depends_on, task_id)
);
CREATE INDEX task_deps_task ON task_deps (task_id);

-- One writer commits in order, so the rowid is a gap-free cursor (retention never
-- deletes the newest event, so ids never go back). Narrow on purpose: the rowid
-- and one index for a task's history; retention deletes in id order.
CREATE TABLE task_events (
    event_id  INTEGER PRIMARY KEY,
    task_id   TEXT    NOT NULL,
    queue     TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    attempt   INTEGER NOT NULL,
    worker_id TEXT,
    time      INTEGER NOT NULL,
    detail    TEXT
);
CREATE INDEX task_events_task ON task_events (task_id);

CREATE TABLE queue_dead_letters (
    queue             TEXT PRIMARY KEY,
    dead_letter_queue TEXT NOT NULL
);
