-- name: statistics_refresh_stale
-- own: the planner statistics of the tasks table, which Postgres plans by
-- Whether `tasks` holds at least $2 times the rows its statistics record (and
-- at least $1).
SELECT s.n_live_tup >= $1 AND s.n_live_tup > $2 * GREATEST(c.reltuples, 0)
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = 'tasks'::regclass

-- name: statistics_refresh_lock_timeout
-- own: the planner statistics of the tasks table, which Postgres plans by
-- Never wait behind a vacuum or a migration: the next tick tries again.
SET LOCAL lock_timeout = '1s'

-- name: statistics_refresh_lock
-- own: the planner statistics of the tasks table, which Postgres plans by
-- One replica at a time.
SELECT pg_try_advisory_xact_lock(hashtext('taskbroker.analyze'))

-- name: statistics_refresh_analyze
-- own: the planner statistics of the tasks table, which Postgres plans by
ANALYZE tasks
