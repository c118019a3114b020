-- Dependencies by key (TaskSpec.depends_on_keys), as in the Postgres migration
-- of the same number: one row per key a task waits for, kept as submitted;
-- `bound_to` is the task that holds the key, set at submit when one exists,
-- else by the trigger below when a task with that key is inserted (one writer:
-- no lock is needed between the two).
CREATE TABLE task_key_deps (
    task_id  TEXT NOT NULL,
    queue    TEXT NOT NULL,
    key      TEXT NOT NULL,
    bound_to TEXT,
    PRIMARY KEY (task_id, queue, key)
);
CREATE INDEX task_key_deps_waiting ON task_key_deps (queue, key) WHERE bound_to IS NULL;

-- A BLOCKED task whose deadline passes goes DEAD like a pending one.
CREATE INDEX tasks_blocked_deadline ON tasks (deadline)
    WHERE deadline IS NOT NULL AND state = 'blocked';

-- The edge is resolved like any other when the keyed task finishes (flow.rs
-- looks task_deps up for every task that finishes).
CREATE TRIGGER tasks_flow_bind_keys AFTER INSERT ON tasks
WHEN NEW.key IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO task_deps (depends_on, task_id, resolved)
    SELECT NEW.id, task_id, 0 FROM task_key_deps
    WHERE queue = NEW.queue AND key = NEW.key AND bound_to IS NULL;
    UPDATE task_key_deps SET bound_to = NEW.id
    WHERE queue = NEW.queue AND key = NEW.key AND bound_to IS NULL;
END;
