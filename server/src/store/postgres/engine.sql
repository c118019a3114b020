-- The engine: readiness.

-- name: ping
-- own: a Postgres standby answers reads and refuses every write
-- Whether the host in use is a standby.
SELECT pg_is_in_recovery()
