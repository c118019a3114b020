-- Dependencies by key (TaskSpec.depends_on_keys), as in the Postgres migration
-- 0020: one row per key a task waits for, kept as submitted; `bound_to` is the
-- task that holds the key, set at submit when one exists, else when a task
-- with that key is inserted, in the insert's transaction (by the broker:
-- store/mysql/key_waits.rs; no trigger, which would need SUPER where binary
-- logging is on).
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
-- or the wait does (the insert's bind sees the row). Keyed inserts never wait for
-- each other.
CREATE TABLE key_deps_lock (
    id TINYINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
INSERT INTO key_deps_lock (id) VALUES (1);
