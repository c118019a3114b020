-- Fewer writes per task (docs/performance.md, "Writes per task"): the event log
-- keeps one row per statement instead of one per event, and a succeeded attempt
-- stays on the task row instead of a row of its own.
--
-- The event log. A statement that records events (a submit of a batch, a lease,
-- a settle of a batch, a bulk operation) writes one row holding all of them, as
-- parallel arrays in event order: event i (from 1) has id first_id + i - 1, so a
-- row covers the ids first_id..last_id, all of one transaction (ids are still
-- (top-level transaction id << 20) + ordinal). Readers unnest the rows: WatchTasks
-- reads rows by last_id (a row with last_id above a cursor holds at least one event
-- after it), one task's history finds its rows through the GIN index on task_ids.
-- No index is unique: nothing looks an event up by its id alone.
CREATE TABLE task_event_batches (
    first_id  BIGINT   NOT NULL,
    last_id   BIGINT   NOT NULL,
    task_ids  TEXT[]   NOT NULL,
    queues    TEXT[]   NOT NULL,
    kinds     TEXT[]   NOT NULL,
    states    TEXT[]   NOT NULL,
    attempts  BIGINT[] NOT NULL,
    workers   TEXT[]   NOT NULL,
    times     BIGINT[] NOT NULL,
    details   TEXT[]   NOT NULL
);
CREATE INDEX task_event_batches_last ON task_event_batches (last_id);
-- A GIN index takes new entries into its pending list (one write per row) and
-- moves them into its tree in bulk (vacuum, or once the list is full).
CREATE INDEX task_event_batches_tasks ON task_event_batches USING gin (task_ids);
-- A row of a large statement stays on its page up to a full page before TOAST
-- moves its arrays out (which would cost a toast row and index entry per 2 kB).
ALTER TABLE task_event_batches SET (
    toast_tuple_target = 8160,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The events recorded before this migration, one row each.
INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds, states,
    attempts, workers, times, details)
SELECT event_id, event_id, ARRAY[task_id], ARRAY[queue], ARRAY[kind], ARRAY[state],
    ARRAY[attempt], ARRAY[worker_id], ARRAY[time], ARRAY[detail]
FROM task_events ORDER BY event_id;

-- The first free event id of this transaction (ids are (xid << 20) + ordinal).
-- The statements in store/postgres/events.rs inline the same lookup.
CREATE OR REPLACE FUNCTION taskbroker_event_base() RETURNS BIGINT LANGUAGE sql STABLE AS $$
    SELECT COALESCE(max(last_id) + 1, pg_current_xact_id()::text::bigint << 20)
    FROM task_event_batches
    WHERE last_id >= pg_current_xact_id()::text::bigint << 20
      AND last_id < (pg_current_xact_id()::text::bigint + 1) << 20
$$;

-- As in 0010, with each statement's events written as one row.
CREATE OR REPLACE FUNCTION taskbroker_resolve_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
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
        INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds, states,
            attempts, workers, times, details)
        SELECT base, base + count(*) - 1, array_agg(id ORDER BY seq),
               array_agg(queue ORDER BY seq), array_agg('cancelled'::text ORDER BY seq),
               array_agg('cancelled'::text ORDER BY seq), array_agg(attempt ORDER BY seq),
               array_agg(NULL::text ORDER BY seq), array_agg(at ORDER BY seq),
               array_agg('DEPENDENCY_FAILED'::text ORDER BY seq)
        FROM gone HAVING count(*) > 0;
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
    woke AS (SELECT * FROM unblocked WHERE state = 'pending'),
    ev AS (
        INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds, states,
            attempts, workers, times, details)
        SELECT base, base + count(*) - 1, array_agg(id ORDER BY seq),
               array_agg(queue ORDER BY seq), array_agg('unblocked'::text ORDER BY seq),
               array_agg(CASE WHEN run_at > at THEN 'scheduled' ELSE 'ready' END ORDER BY seq),
               array_agg(attempt ORDER BY seq), array_agg(NULL::text ORDER BY seq),
               array_agg(at ORDER BY seq), array_agg(NULL::text ORDER BY seq)
        FROM woke HAVING count(*) > 0)
    SELECT array_agg(DISTINCT queue) INTO woken FROM woke;
    IF woken IS NOT NULL THEN
        PERFORM pg_notify('taskbroker', q) FROM unnest(woken) AS q;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION taskbroker_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
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
    INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds, states,
        attempts, workers, times, details)
    SELECT base, base, ARRAY[id], ARRAY[queue], ARRAY['submitted'], ARRAY['ready'],
        ARRAY[attempt], ARRAY[NULL::text], ARRAY[created_at], ARRAY[NULL::text] FROM notice;
    PERFORM pg_notify('taskbroker', dlq);
    RETURN NULL;
END $$;

DROP TABLE task_events;

-- The attempts. A succeeded attempt is no longer written to task_attempts: the
-- task row keeps it (state 'succeeded' with attempt, leased_by, leased_address,
-- leased_at, fencing_token, finished_at), and task_attempts holds the attempts
-- that ended otherwise. Readers take a succeeded task's attempt from its row
-- unless task_attempts has one for that attempt (tasks that succeeded before
-- this migration). A requeue of a succeeded task, were there one, would first
-- have to write the row's attempt out.
--
-- The attempt history as readers see it, both forms together.
CREATE VIEW task_attempts_all AS
SELECT task_id, attempt, worker_id, worker_address, leased_at, finished_at, outcome,
    error, fencing_token
FROM task_attempts
UNION ALL
SELECT t.id, t.attempt, COALESCE(t.leased_by, ''), COALESCE(t.leased_address, ''),
    COALESCE(t.leased_at, t.updated_at), t.finished_at, 'succeeded', NULL, t.fencing_token
FROM tasks t
WHERE t.state = 'succeeded' AND NOT EXISTS (
    SELECT 1 FROM task_attempts a WHERE a.task_id = t.id AND a.attempt = t.attempt);

-- The lease-expiry index goes: a lease wrote an entry into it, and so did every
-- heartbeat (which changes lease_expires_at and nothing else indexed), so neither
-- was a HOT update. The reaper finds expired leases through tasks_leased instead,
-- which holds only the leases in flight, reading each one's expiry from its row.
DROP INDEX tasks_lease_expiry;
