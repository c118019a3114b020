-- Flow (#15): task dependencies, the event log, dead-letter notices, retry schedules.
--
-- Dependencies: an edge table (task_deps) and a remaining-count per task
-- (tasks.deps_remaining), so a task that finishes touches only its own dependents.
-- A task waiting for dependencies has state 'blocked'.
ALTER TABLE tasks ADD COLUMN deps_remaining BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN run_if_dependency_fails BOOLEAN NOT NULL DEFAULT FALSE;
-- 'operator' or 'dependency_failed' when the task was cancelled.
ALTER TABLE tasks ADD COLUMN cancel_reason TEXT;
-- RetryPolicy.schedule: a JSON array of delays in ms, or NULL.
ALTER TABLE tasks ADD COLUMN retry_schedule TEXT;
-- Set when another task names this one in depends_on: only such a task's end
-- runs the dependents trigger below (every other statement skips it in its WHEN).
ALTER TABLE tasks ADD COLUMN has_dependents BOOLEAN NOT NULL DEFAULT FALSE;

-- One edge per (dependency, dependent); resolved once the dependency finished and
-- the dependent was told (so a requeued and finished-again dependency counts once).
CREATE TABLE task_deps (
    depends_on TEXT    NOT NULL,
    task_id    TEXT    NOT NULL,
    resolved   BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (depends_on, task_id)
);
CREATE INDEX task_deps_task ON task_deps (task_id);

-- The event log, written by the statement that makes each transition (in the
-- same statement as a data-modifying CTE, or in the same transaction), never by
-- a trigger on every row. event_id = (top-level transaction id << 20) + ordinal
-- within the transaction: ids sort in the order in which a reader can see them
-- become final (every transaction with an id below the oldest running one has
-- ended), which is what lets WatchTasks resume from an event_id without gaps
-- (docs/semantics.md). Narrow on purpose: two indexes (the cursor and one task's
-- history); retention deletes by id order, so there is no time index.
CREATE TABLE task_events (
    event_id  BIGINT PRIMARY KEY,
    task_id   TEXT   NOT NULL,
    queue     TEXT   NOT NULL,
    kind      TEXT   NOT NULL,
    state     TEXT   NOT NULL,
    attempt   BIGINT NOT NULL,
    worker_id TEXT,
    time      BIGINT NOT NULL,
    detail    TEXT
);
CREATE INDEX task_events_task ON task_events (task_id);

-- Per-queue dead-letter queues, written from the broker's configuration at start.
CREATE TABLE queue_dead_letters (
    queue             TEXT PRIMARY KEY,
    dead_letter_queue TEXT NOT NULL
);

-- The first free event id of this transaction (ids are (xid << 20) + ordinal).
-- The statements in store/postgres/events.rs inline the same lookup.
CREATE FUNCTION taskbroker_event_base() RETURNS BIGINT LANGUAGE sql STABLE AS $$
    SELECT COALESCE(max(event_id) + 1, pg_current_xact_id()::text::bigint << 20)
    FROM task_events
    WHERE event_id >= pg_current_xact_id()::text::bigint << 20
      AND event_id < (pg_current_xact_id()::text::bigint + 1) << 20
$$;

-- A task with dependents finished: a failed one cancels its blocked dependents
-- (and what waits on them in turn, in one recursive statement); then each
-- dependent counts it off and the last one unblocks it. Fires only for tasks
-- named in someone's depends_on (has_dependents), so completions of other tasks
-- never enter plpgsql.
CREATE FUNCTION taskbroker_resolve_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at BIGINT := NEW.updated_at;
    base BIGINT;
    woken TEXT[];
BEGIN
    IF NEW.state IN ('dead', 'cancelled') THEN
        base := taskbroker_event_base();
        WITH RECURSIVE doomed(id) AS (
            SELECT d.task_id FROM task_deps d JOIN tasks t ON t.id = d.task_id
            WHERE d.depends_on = NEW.id AND NOT d.resolved
              AND t.state = 'blocked' AND NOT t.run_if_dependency_fails
            UNION
            SELECT d.task_id FROM doomed JOIN task_deps d ON d.depends_on = doomed.id AND NOT d.resolved
              JOIN tasks t ON t.id = d.task_id
            WHERE t.state = 'blocked' AND NOT t.run_if_dependency_fails
        ),
        gone AS (
            UPDATE tasks t SET state = 'cancelled', cancel_reason = 'dependency_failed',
                last_error = 'DEPENDENCY_FAILED', finished_at = at, updated_at = at
            WHERE t.id IN (SELECT id FROM doomed) AND t.state = 'blocked'
            RETURNING t.seq, t.id, t.queue, t.attempt)
        INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, time, detail)
        SELECT base + row_number() OVER (ORDER BY seq), id, queue, 'cancelled', 'cancelled',
               attempt, NULL, at, 'DEPENDENCY_FAILED'
        FROM gone;
    END IF;
    base := taskbroker_event_base();
    WITH fin AS (
        UPDATE task_deps d SET resolved = TRUE
        WHERE d.depends_on = NEW.id AND NOT d.resolved
        RETURNING d.task_id),
    unblocked AS (
        UPDATE tasks t SET deps_remaining = t.deps_remaining - 1,
            state = CASE WHEN t.deps_remaining <= 1 THEN 'pending' ELSE t.state END,
            updated_at = at
        FROM fin WHERE t.id = fin.task_id AND t.state = 'blocked'
        RETURNING t.seq, t.id, t.queue, t.state, t.run_at, t.attempt),
    ev AS (
        INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, time, detail)
        SELECT base + row_number() OVER (ORDER BY seq), id, queue, 'unblocked',
               CASE WHEN run_at > at THEN 'scheduled' ELSE 'ready' END, attempt, NULL, at, NULL
        FROM unblocked WHERE state = 'pending'
        RETURNING queue)
    SELECT array_agg(DISTINCT queue) INTO woken FROM ev;
    IF woken IS NOT NULL THEN
        PERFORM pg_notify('taskbroker', q) FROM unnest(woken) AS q;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_flow_dependents AFTER UPDATE OF state ON tasks
    FOR EACH ROW
    WHEN (NEW.has_dependents AND NEW.state IN ('succeeded', 'dead', 'cancelled')
          AND OLD.state NOT IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION taskbroker_resolve_dependents();

-- A task went DEAD in a queue with a dead-letter queue: a notice task there (its
-- SUBMITTED event with it), in the same transaction.
CREATE FUNCTION taskbroker_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    dlq TEXT;
    base BIGINT;
BEGIN
    SELECT dead_letter_queue INTO dlq FROM queue_dead_letters
    WHERE queue = NEW.queue AND dead_letter_queue <> NEW.queue;
    IF dlq IS NULL THEN
        RETURN NULL;
    END IF;
    base := taskbroker_event_base();
    WITH notice AS (
        INSERT INTO tasks (id, queue, payload, priority, run_at, state, max_attempts,
            attempts_allowed, initial_backoff_ms, backoff_multiplier, max_backoff_ms,
            jitter, metadata, created_at, updated_at)
        VALUES (gen_random_uuid()::text, dlq,
            convert_to(json_build_object('task_id', NEW.id, 'queue', NEW.queue, 'key', NEW.key,
                'attempts', NEW.attempt, 'last_error', NEW.last_error)::text, 'UTF8'),
            0, NEW.updated_at, 'pending', 3, 3, 10000, 2.0, 3600000, 0.2,
            json_build_object('dead_task_id', NEW.id)::text, NEW.updated_at, NEW.updated_at)
        RETURNING id, queue, attempt, created_at)
    INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, time, detail)
    SELECT base, id, queue, 'submitted', 'ready', attempt, NULL, created_at, NULL FROM notice;
    PERFORM pg_notify('taskbroker', dlq);
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_flow_dead_letter AFTER UPDATE OF state ON tasks
    FOR EACH ROW
    WHEN (NEW.state = 'dead' AND OLD.state <> 'dead')
    EXECUTE FUNCTION taskbroker_dead_letter();
