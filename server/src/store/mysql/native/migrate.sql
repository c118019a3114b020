-- name: migrate_lock
-- own: MySQL's DDL commits as it goes; replicas take turns by a named lock
-- GET_LOCK names are at most 64 characters; a database name may be 64.
SELECT GET_LOCK(CONCAT('taskbroker-migrate-', LEFT(SHA2(DATABASE(), 256), 32)), -1)

-- name: migrate_unlock
-- own: the named lock of migrate_lock
SELECT RELEASE_LOCK(CONCAT('taskbroker-migrate-', LEFT(SHA2(DATABASE(), 256), 32)))

-- name: migrate_trigger_present
-- own: the trigger an earlier text of migration 4 created
SELECT COUNT(*) FROM information_schema.triggers
WHERE trigger_schema = DATABASE() AND trigger_name = 'tasks_flow_bind_keys'

-- name: migrate_trigger_drop
-- own: the trigger an earlier text of migration 4 created
DROP TRIGGER tasks_flow_bind_keys

-- name: migrate_table_exists
-- own: a failed migration stays recorded on MySQL (DDL commits as it goes)
-- Whether the table named by the one parameter exists.
SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = ?

-- name: migrate_failed
-- own: a failed migration stays recorded on MySQL (DDL commits as it goes)
-- The first migration recorded as failed, and the last one recorded.
SELECT version, (SELECT MAX(version) FROM _sqlx_migrations) FROM _sqlx_migrations
WHERE success = FALSE ORDER BY version LIMIT 1

-- name: migrate_clear_failed
-- own: a failed migration stays recorded on MySQL (DDL commits as it goes)
DELETE FROM _sqlx_migrations WHERE version = ? AND success = FALSE

-- name: migrate_4_rows
-- own: the undo of migration 4 drops task_key_deps only when it is empty
SELECT COUNT(*) FROM (SELECT 1 FROM task_key_deps LIMIT 1) t

-- name: migrate_4_undo_task_key_deps
-- own: what a partial run of migration 4 may have left
DROP TABLE IF EXISTS task_key_deps

-- name: migrate_4_undo_key_deps_lock
-- own: what a partial run of migration 4 may have left
DROP TABLE IF EXISTS key_deps_lock
