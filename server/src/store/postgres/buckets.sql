-- Limit buckets and cooldowns: the operators' and failing workers' writes,
-- and the reads of the console, ExplainTask and the settings snapshot.

-- name: bucket_list
SELECT name, config, tokens, refilled_at, updated_at FROM limit_buckets ORDER BY name

-- name: bucket_put
-- Defines a bucket or replaces its settings; its token bucket is kept.
INSERT INTO limit_buckets (name, config, updated_at) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET config = EXCLUDED.config, updated_at = EXCLUDED.updated_at

-- name: bucket_delete
DELETE FROM limit_buckets WHERE name = $1

-- name: bucket_delete_queues
DELETE FROM bucket_queues WHERE bucket = $1

-- name: bucket_leased
-- The leases held by the tasks of a bucket (their `taskbroker.bucket` entry).
SELECT count(*) FROM tasks WHERE state = 'leased' AND ${task_bucket} = $1

-- name: bucket_queue_note
INSERT INTO bucket_queues (bucket, queue) VALUES ($1, $2) ON CONFLICT DO NOTHING

-- name: bucket_queues
SELECT bucket, queue FROM bucket_queues ORDER BY bucket, queue

-- name: cooldown_put
-- A later end wins; an earlier one leaves the cooldown as it is.
INSERT INTO cooldowns (queue, ckey, bucket, until_ms, task_id) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (queue, ckey, bucket) DO UPDATE SET
  task_id = CASE WHEN EXCLUDED.until_ms > cooldowns.until_ms THEN EXCLUDED.task_id
    ELSE cooldowns.task_id END,
  until_ms = GREATEST(cooldowns.until_ms, EXCLUDED.until_ms)

-- name: cooldown_purge
DELETE FROM cooldowns WHERE until_ms <= $1

-- name: cooldown_list
SELECT queue, ckey, bucket, until_ms, task_id FROM cooldowns WHERE until_ms > $1
ORDER BY until_ms, queue, ckey, bucket

-- name: cooldown_lift
DELETE FROM cooldowns WHERE queue = $1 AND ckey = $2 AND bucket = $3 AND until_ms > $4

-- fragment: task_bucket
-- The bucket a task counts against (the broker sets it at submit).
(metadata::jsonb ->> 'taskbroker.bucket')
