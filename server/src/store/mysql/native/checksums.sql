-- name: checksums_recorded
-- own: sqlx's migration table as MySQL's information_schema has it
-- Whether the database was migrated before (`_sqlx_migrations` exists).
SELECT 1 FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = '_sqlx_migrations'

-- name: checksums_rewrite
-- own: a migration of this backend whose text changed after it shipped
-- The current checksum, where the recorded one is exactly the earlier text's.
UPDATE _sqlx_migrations SET checksum = ? WHERE version = ? AND checksum = ?
