-- The limits of a gated lease (store/limits.rs): cooldowns, the buckets a
-- batch may charge (rows locked), and what their tasks hold.

-- name: lease_limits_cooldowns
SELECT queue, ckey, bucket, until_ms FROM cooldowns WHERE until_ms > $1

-- name: lease_limits_bucket_names
SELECT bucket FROM bucket_queues WHERE queue = $1

-- name: lease_limits_bucket
-- A bucket's row, locked until the lease commits (after the queue rows).
SELECT config, tokens, refilled_at FROM limit_buckets WHERE name = $1 FOR UPDATE

-- name: lease_limits_candidate_buckets
SELECT seq, ${task_bucket} FROM tasks WHERE seq = ANY($1::bigint[])
AND ${task_bucket} IS NOT NULL

-- name: lease_limits_charge
-- The tokens after the lease; refilled_at never goes back (a replica whose
-- clock is behind refills nothing, rather than letting the next refill twice).
UPDATE limit_buckets SET tokens = $1, refilled_at = GREATEST(refilled_at, $2) WHERE name = $3
