-- The limits of a gated lease (store/limits.rs): cooldowns, the buckets a
-- batch may charge (rows locked), and what their tasks hold.

-- name: lease_limits_cooldowns
SELECT queue, ckey, bucket, until_ms FROM cooldowns WHERE until_ms > ?

-- name: lease_limits_bucket_names
SELECT bucket FROM bucket_queues WHERE queue = ?

-- name: lease_limits_bucket
-- A bucket's row, locked until the lease commits (after the queue rows).
SELECT config, tokens, refilled_at FROM limit_buckets WHERE name = ? FOR UPDATE

-- name: lease_limits_candidate_buckets
SELECT seq, ${task_bucket} FROM tasks WHERE seq IN (SELECT v FROM JSON_TABLE(?, '$[*]' COLUMNS (v BIGINT PATH '$')) AS j)
AND ${task_bucket} IS NOT NULL

-- name: lease_limits_charge
-- The tokens after the lease; refilled_at never goes back (a replica whose
-- clock is behind refills nothing, rather than letting the next refill twice).
UPDATE limit_buckets SET tokens = ?, refilled_at = GREATEST(refilled_at, ?) WHERE name = ?
