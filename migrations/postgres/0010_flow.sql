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

-- One edge per (dependency, dependent); resolved once the dependency finished and
-- the dependent was told (so a requeued and finished-again dependency counts once).
CREATE TABLE task_deps (
    depends_on TEXT    NOT NULL,
    task_id    TEXT    NOT NULL,
    resolved   BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (depends_on, task_id)
);
CREATE INDEX task_deps_task ON task_deps (task_id);

-- The event log. event_id = (top-level transaction id << 20) + ordinal within the
-- transaction: ids sort in the order in which a reader can see them become final
-- (every transaction with an id below the oldest running one has ended), which is
-- what lets WatchTasks resume from an event_id without gaps (docs/semantics.md).
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
CREATE INDEX task_events_task ON task_events (task_id, event_id);
CREATE INDEX task_events_time ON task_events (time);

-- Per-queue dead-letter queues, written from the broker's configuration at start.
CREATE TABLE queue_dead_letters (
    queue             TEXT PRIMARY KEY,
    dead_letter_queue TEXT NOT NULL
);

-- The first free event id of this transaction (ids are (xid << 20) + ordinal).
CREATE FUNCTION taskbroker_event_base() RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    base BIGINT := (pg_current_xact_id()::text::bigint) << 20;
BEGIN
    RETURN COALESCE((SELECT max(event_id) FROM task_events
        WHERE event_id >= base AND event_id < base + 1048576), base);
END $$;

-- Fails the statement when a transaction would run out of event ordinals.
CREATE FUNCTION taskbroker_event_check(first BIGINT, n BIGINT) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    IF (first & 1048575) + n >= 1048576 THEN
        RAISE EXCEPTION 'more than 1048575 task events in one transaction';
    END IF;
END $$;

-- The visible state of a task row at `at`.
CREATE FUNCTION taskbroker_visible_state(state TEXT, run_at BIGINT, at BIGINT)
RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN state = 'pending' AND run_at > at THEN 'scheduled'
                WHEN state = 'pending' THEN 'ready' ELSE state END
$$;

-- Every INSERT into tasks: SUBMITTED events, in bulk (one INSERT per statement).
CREATE FUNCTION taskbroker_tasks_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    base BIGINT := taskbroker_event_base();
    n BIGINT;
BEGIN
    INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, time, detail)
    SELECT base + row_number() OVER (ORDER BY seq), id, queue, 'submitted',
           taskbroker_visible_state(state, run_at, created_at), attempt, NULL, created_at, NULL
    FROM new_rows;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM taskbroker_event_check(base, n);
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_flow_insert AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskbroker_tasks_inserted();

-- Every UPDATE of tasks: the events of its transitions, the dependents of tasks
-- that finished, and dead-letter notices, all in the updating transaction. One
-- INSERT of events per statement, whatever the number of rows.
CREATE FUNCTION taskbroker_tasks_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    base BIGINT;
    n BIGINT;
    at BIGINT;
    woken TEXT[];
BEGIN
    -- 1. Events: one or two per changed row (a failed attempt, then what follows).
    base := taskbroker_event_base();
    INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, time, detail)
    SELECT base + row_number() OVER (ORDER BY c.seq, e.k), c.id, c.queue, e.kind,
           taskbroker_visible_state(c.state, c.run_at, c.updated_at), c.attempt,
           e.worker, c.updated_at, e.detail
    FROM (SELECT n.seq, n.id, n.queue, n.state, n.run_at, n.updated_at, n.attempt,
                 n.last_error, n.cancel_reason, n.leased_by,
                 o.state AS old_state, o.leased_by AS old_worker,
                 o.lease_expires_at AS old_expiry,
                 o.state = 'leased' AND n.state = 'leased'
                   AND o.checkpoint IS DISTINCT FROM n.checkpoint AS checkpointed,
                 o.state = n.state AND (o.run_at <> n.run_at OR o.priority <> n.priority
                   OR o.deadline IS DISTINCT FROM n.deadline OR o.max_attempts <> n.max_attempts
                   OR o.cancel_requested <> n.cancel_requested) AS updated
          FROM new_rows n JOIN old_rows o ON o.seq = n.seq) c
    CROSS JOIN LATERAL (VALUES
        -- The attempt that ended without success.
        (1, CASE WHEN c.old_state = 'leased' AND c.state IN ('pending', 'dead', 'cancelled')
                 THEN CASE WHEN c.old_expiry <= c.updated_at THEN 'heartbeat_lost' ELSE 'failed' END
            END, c.old_worker, c.last_error),
        -- The transition itself.
        (2, CASE
              WHEN c.old_state = c.state THEN
                CASE WHEN c.checkpointed THEN 'checkpointed' WHEN c.updated THEN 'updated' END
              WHEN c.state = 'leased' THEN 'leased'
              WHEN c.state = 'succeeded' THEN 'succeeded'
              WHEN c.state = 'dead' THEN 'dead'
              WHEN c.state = 'cancelled' THEN 'cancelled'
              WHEN c.state = 'pending' AND c.old_state = 'leased' THEN 'retry_scheduled'
              WHEN c.state = 'pending' AND c.old_state = 'blocked' THEN 'unblocked'
              WHEN c.state = 'pending' THEN 'requeued'
            END,
         CASE WHEN c.state IN ('leased', 'succeeded') OR c.checkpointed THEN c.leased_by END,
         CASE WHEN c.state = 'dead' THEN c.last_error
              WHEN c.state = 'cancelled' AND c.cancel_reason = 'dependency_failed'
                THEN 'DEPENDENCY_FAILED' END)
    ) AS e(k, kind, worker, detail)
    WHERE e.kind IS NOT NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM taskbroker_event_check(base, n);
    END IF;

    -- 2. Dependencies of the tasks that finished now (only those with dependents).
    IF EXISTS (SELECT 1 FROM new_rows n JOIN old_rows o ON o.seq = n.seq
               JOIN task_deps d ON d.depends_on = n.id AND NOT d.resolved
               WHERE n.state IN ('succeeded', 'dead', 'cancelled')
                 AND o.state NOT IN ('succeeded', 'dead', 'cancelled')) THEN
        SELECT max(updated_at) INTO at FROM new_rows;
        -- A failed dependency cancels its blocked dependents, and everything that
        -- waits on them in turn, in one statement (a recursive walk, not one
        -- trigger level per link of a chain). Their own run_if_dependency_fails
        -- dependents are told by this trigger again, one level down.
        WITH RECURSIVE doomed(id) AS (
            SELECT d.task_id FROM new_rows n JOIN old_rows o ON o.seq = n.seq
              JOIN task_deps d ON d.depends_on = n.id AND NOT d.resolved
              JOIN tasks t ON t.id = d.task_id
            WHERE n.state IN ('dead', 'cancelled') AND o.state NOT IN ('succeeded', 'dead', 'cancelled')
              AND t.state = 'blocked' AND NOT t.run_if_dependency_fails
            UNION
            SELECT d.task_id FROM doomed JOIN task_deps d ON d.depends_on = doomed.id AND NOT d.resolved
              JOIN tasks t ON t.id = d.task_id
            WHERE t.state = 'blocked' AND NOT t.run_if_dependency_fails
        )
        UPDATE tasks t SET state = 'cancelled', cancel_reason = 'dependency_failed',
            last_error = 'DEPENDENCY_FAILED', finished_at = at, updated_at = at
        WHERE t.id IN (SELECT id FROM doomed) AND t.state = 'blocked';
        -- The rest: count the finished dependency off; the last one unblocks.
        WITH fin AS (
            UPDATE task_deps d SET resolved = TRUE FROM new_rows n JOIN old_rows o ON o.seq = n.seq
            WHERE d.depends_on = n.id AND NOT d.resolved
              AND n.state IN ('succeeded', 'dead', 'cancelled')
              AND o.state NOT IN ('succeeded', 'dead', 'cancelled')
            RETURNING d.task_id),
        per AS (SELECT task_id, count(*) AS k FROM fin GROUP BY task_id),
        unblocked AS (
            UPDATE tasks t SET deps_remaining = t.deps_remaining - per.k,
                state = CASE WHEN t.deps_remaining - per.k <= 0 THEN 'pending' ELSE t.state END,
                updated_at = at
            FROM per WHERE t.id = per.task_id AND t.state = 'blocked'
            RETURNING t.queue, t.state)
        SELECT array_agg(DISTINCT queue) INTO woken FROM unblocked WHERE state = 'pending';
        IF woken IS NOT NULL THEN
            PERFORM pg_notify('taskbroker', q) FROM unnest(woken) AS q;
        END IF;
    END IF;

    -- 3. Dead-letter notices: a task on the dead-letter queue for each task that
    --    went DEAD in a queue that has one.
    IF EXISTS (SELECT 1 FROM queue_dead_letters) AND EXISTS (
        SELECT 1 FROM new_rows n JOIN old_rows o ON o.seq = n.seq
        WHERE n.state = 'dead' AND o.state <> 'dead') THEN
        WITH notice AS (
            INSERT INTO tasks (id, queue, payload, priority, run_at, state, max_attempts,
                attempts_allowed, initial_backoff_ms, backoff_multiplier, max_backoff_ms,
                jitter, metadata, created_at, updated_at)
            SELECT gen_random_uuid()::text, q.dead_letter_queue,
                convert_to(json_build_object('task_id', n.id, 'queue', n.queue, 'key', n.key,
                    'attempts', n.attempt, 'last_error', n.last_error)::text, 'UTF8'),
                0, n.updated_at, 'pending', 3, 3, 10000, 2.0, 3600000, 0.2,
                json_build_object('dead_task_id', n.id)::text, n.updated_at, n.updated_at
            FROM new_rows n JOIN old_rows o ON o.seq = n.seq
            JOIN queue_dead_letters q ON q.queue = n.queue
            WHERE n.state = 'dead' AND o.state <> 'dead' AND q.dead_letter_queue <> n.queue
            RETURNING queue)
        SELECT array_agg(DISTINCT queue) INTO woken FROM notice;
        IF woken IS NOT NULL THEN
            PERFORM pg_notify('taskbroker', q) FROM unnest(woken) AS q;
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_flow_update AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION taskbroker_tasks_updated();
