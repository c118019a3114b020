-- Dependencies by key (TaskSpec.depends_on_keys), as in the Postgres migration
-- 0020: one row per key a task waits for, kept as submitted; `bound_to` is the
-- task that holds the key, set at submit when one exists, else by the trigger
-- below when a task with that key is inserted, in the insert's transaction.
CREATE TABLE task_key_deps (
    seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_id VARCHAR(64) NOT NULL,
    queue VARCHAR(255) NOT NULL,
    `key` VARCHAR(512) NOT NULL,
    bound_to VARCHAR(64) NULL,
    KEY task_key_deps_task (task_id),
    KEY task_key_deps_key (queue, `key`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row: a Submit whose key has no task yet locks it (FOR UPDATE) while it
-- looks the key up and records the wait; every keyed insert takes it shared
-- until it commits. Either the insert commits first (the lookup sees the task)
-- or the wait does (the trigger sees the row). Keyed inserts never wait for
-- each other.
CREATE TABLE key_deps_lock (
    id TINYINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
INSERT INTO key_deps_lock (id) VALUES (1);

-- The edge is resolved like any other when the keyed task finishes (events.rs
-- looks task_deps up for every task that finishes).
CREATE TRIGGER tasks_flow_bind_keys AFTER INSERT ON tasks FOR EACH ROW
BEGIN
    IF NEW.`key` IS NOT NULL THEN
        SELECT id INTO @taskbroker_key_deps_lock FROM key_deps_lock WHERE id = 1
            LOCK IN SHARE MODE;
        INSERT IGNORE INTO task_deps (depends_on, task_id, resolved)
        SELECT NEW.id, task_id, FALSE FROM task_key_deps
        WHERE queue = NEW.queue AND `key` = NEW.`key` AND bound_to IS NULL;
        UPDATE task_key_deps SET bound_to = NEW.id
        WHERE queue = NEW.queue AND `key` = NEW.`key` AND bound_to IS NULL;
    END IF;
END;
