-- Flow (#15): task dependencies, the event log, dead-letter notices, retry schedules.
-- The same shape as the Postgres migration; SQLite's row triggers do what the
-- Postgres statement triggers do, and the writer resolves dependents
-- (store/sqlite/flow.rs) from flow_finished before each job's savepoint ends.
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

-- Tasks with dependents that finished in the running write job; always empty
-- between jobs.
CREATE TABLE flow_finished (
    task_id TEXT    NOT NULL,
    state   TEXT    NOT NULL,
    at      INTEGER NOT NULL
);

-- One writer commits in order, so a plain increasing id is a gap-free cursor.
CREATE TABLE task_events (
    event_id  INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id   TEXT    NOT NULL,
    queue     TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    attempt   INTEGER NOT NULL,
    worker_id TEXT,
    time      INTEGER NOT NULL,
    detail    TEXT
);
CREATE INDEX task_events_task ON task_events (task_id, event_id);
CREATE INDEX task_events_time ON task_events (time);

CREATE TABLE queue_dead_letters (
    queue             TEXT PRIMARY KEY,
    dead_letter_queue TEXT NOT NULL
);

CREATE TRIGGER tasks_flow_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_events (task_id, queue, kind, state, attempt, worker_id, time, detail)
    VALUES (new.id, new.queue, 'submitted',
        CASE WHEN new.state = 'pending' AND new.run_at > new.created_at THEN 'scheduled'
             WHEN new.state = 'pending' THEN 'ready' ELSE new.state END,
        new.attempt, NULL, new.created_at, NULL);
END;

-- Heartbeats change none of these columns, so they fire nothing.
CREATE TRIGGER tasks_flow_update
AFTER UPDATE OF state, checkpoint, run_at, priority, deadline, max_attempts, cancel_requested
ON tasks BEGIN
    -- The attempt that ended without success.
    INSERT INTO task_events (task_id, queue, kind, state, attempt, worker_id, time, detail)
    SELECT new.id, new.queue,
        CASE WHEN old.lease_expires_at <= new.updated_at THEN 'heartbeat_lost' ELSE 'failed' END,
        CASE WHEN new.state = 'pending' AND new.run_at > new.updated_at THEN 'scheduled'
             WHEN new.state = 'pending' THEN 'ready' ELSE new.state END,
        new.attempt, old.leased_by, new.updated_at, new.last_error
    WHERE old.state = 'leased' AND new.state IN ('pending', 'dead', 'cancelled');
    -- The transition itself.
    INSERT INTO task_events (task_id, queue, kind, state, attempt, worker_id, time, detail)
    SELECT * FROM (SELECT new.id, new.queue,
        CASE
          WHEN old.state = new.state THEN
            CASE WHEN old.state = 'leased' AND old.checkpoint IS NOT new.checkpoint THEN 'checkpointed'
                 WHEN old.run_at <> new.run_at OR old.priority <> new.priority
                   OR old.deadline IS NOT new.deadline OR old.max_attempts <> new.max_attempts
                   OR old.cancel_requested <> new.cancel_requested THEN 'updated' END
          WHEN new.state = 'leased' THEN 'leased'
          WHEN new.state = 'succeeded' THEN 'succeeded'
          WHEN new.state = 'dead' THEN 'dead'
          WHEN new.state = 'cancelled' THEN 'cancelled'
          WHEN new.state = 'pending' AND old.state = 'leased' THEN 'retry_scheduled'
          WHEN new.state = 'pending' AND old.state = 'blocked' THEN 'unblocked'
          WHEN new.state = 'pending' THEN 'requeued'
        END AS kind,
        CASE WHEN new.state = 'pending' AND new.run_at > new.updated_at THEN 'scheduled'
             WHEN new.state = 'pending' THEN 'ready' ELSE new.state END,
        new.attempt,
        CASE WHEN new.state IN ('leased', 'succeeded') THEN new.leased_by END,
        new.updated_at,
        CASE WHEN new.state = 'dead' THEN new.last_error
             WHEN new.state = 'cancelled' AND new.cancel_reason = 'dependency_failed'
               THEN 'DEPENDENCY_FAILED' END)
    WHERE kind IS NOT NULL;
    -- A task with dependents finished: the writer tells them (store/sqlite/flow.rs).
    INSERT INTO flow_finished (task_id, state, at)
    SELECT new.id, new.state, new.updated_at
    WHERE new.state IN ('succeeded', 'dead', 'cancelled')
      AND old.state NOT IN ('succeeded', 'dead', 'cancelled')
      AND EXISTS (SELECT 1 FROM task_deps WHERE depends_on = new.id AND NOT resolved);
    -- A dead-letter notice when the task went DEAD in a queue that has one.
    INSERT INTO tasks (id, queue, payload, priority, run_at, state, max_attempts,
        attempts_allowed, initial_backoff_ms, backoff_multiplier, max_backoff_ms, jitter,
        metadata, created_at, updated_at)
    SELECT lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4'
            || substr(lower(hex(randomblob(2))), 2) || '-'
            || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2)
            || '-' || lower(hex(randomblob(6))),
        q.dead_letter_queue,
        CAST(json_object('task_id', new.id, 'queue', new.queue, 'key', new.key,
            'attempts', new.attempt, 'last_error', new.last_error) AS BLOB),
        0, new.updated_at, 'pending', 3, 3, 10000, 2.0, 3600000, 0.2,
        json_object('dead_task_id', new.id), new.updated_at, new.updated_at
    FROM queue_dead_letters q
    WHERE q.queue = new.queue AND new.state = 'dead' AND old.state <> 'dead'
      AND q.dead_letter_queue <> new.queue;
END;
