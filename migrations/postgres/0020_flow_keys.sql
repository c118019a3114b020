-- Dependencies by key (TaskSpec.depends_on_keys): one row per key a task waits
-- for, kept as submitted (AdminService shows them). `bound_to` is the task that
-- holds the key: set at submit when one exists already (its edge is in
-- task_deps then, like any dependency), else when a task with that key is
-- inserted later, by the trigger below, in the insert's own transaction.
-- Rows go with their dependent when retention purges it.
CREATE TABLE task_key_deps (
    task_id  TEXT NOT NULL,
    queue    TEXT NOT NULL,
    key      TEXT NOT NULL,
    bound_to TEXT,
    PRIMARY KEY (task_id, queue, key)
);
-- The keys still waited for: what an insert of a keyed task looks up (usually
-- nothing).
CREATE INDEX task_key_deps_waiting ON task_key_deps (queue, key) WHERE bound_to IS NULL;

-- A BLOCKED task whose deadline passes goes DEAD like a pending one; the reaper
-- finds them here (tasks_deadline holds pending and leased tasks only).
CREATE INDEX tasks_blocked_deadline ON tasks (deadline)
    WHERE deadline IS NOT NULL AND state = 'blocked';

-- A keyed task inserted: the dependents waiting for its key now wait for it.
-- Submit of a dependent whose key has no task yet holds the exclusive form of
-- this advisory lock while it looks the key up and records the wait, and every
-- keyed insert holds the shared form until it commits: either the insert
-- commits first (the dependent's lookup sees the task) or the wait does (this
-- lookup sees the row). Keyed inserts never wait for each other.
CREATE FUNCTION taskbroker_bind_key_deps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('taskbroker.key_deps', 0));
    WITH bound AS (
        UPDATE task_key_deps SET bound_to = NEW.id
        WHERE queue = NEW.queue AND key = NEW.key AND bound_to IS NULL
        RETURNING task_id)
    INSERT INTO task_deps (depends_on, task_id, resolved)
    SELECT NEW.id, task_id, FALSE FROM bound
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        UPDATE tasks SET has_dependents = TRUE WHERE seq = NEW.seq;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_flow_bind_keys AFTER INSERT ON tasks
    FOR EACH ROW
    WHEN (NEW.key IS NOT NULL)
    EXECUTE FUNCTION taskbroker_bind_key_deps();
