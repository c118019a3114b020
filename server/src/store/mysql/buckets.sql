-- Limit buckets and cooldowns: the operators' and failing workers' writes,
-- and the reads of the console, ExplainTask and the settings snapshot.

-- name: bucket_list
SELECT name, config, tokens, refilled_at, updated_at FROM limit_buckets ORDER BY name

-- name: bucket_put
-- Defines a bucket or replaces its settings; its token bucket is kept.
INSERT INTO limit_buckets (name, config, updated_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE config = VALUES(config), updated_at = VALUES(updated_at)

-- name: bucket_delete
DELETE FROM limit_buckets WHERE name = ?

-- name: bucket_delete_queues
DELETE FROM bucket_queues WHERE bucket = ?

-- name: bucket_leased
-- The leases held by the tasks of a bucket (their `taskbroker.bucket` entry).
SELECT count(*) FROM tasks WHERE state = 'leased' AND ${task_bucket} = ?

-- name: bucket_queue_note
INSERT IGNORE INTO bucket_queues (bucket, queue) VALUES (?, ?)

-- name: bucket_queues
SELECT bucket, queue FROM bucket_queues ORDER BY bucket, queue

-- name: cooldown_put
-- A later end wins; an earlier one leaves the cooldown as it is (task_id is
-- set before until_ms, so it compares with the old end).
INSERT INTO cooldowns (queue, ckey, bucket, until_ms, task_id) VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE
  task_id = IF(VALUES(until_ms) > until_ms, VALUES(task_id), task_id),
  until_ms = GREATEST(until_ms, VALUES(until_ms))

-- name: cooldown_purge
DELETE FROM cooldowns WHERE until_ms <= ?

-- name: cooldown_list
SELECT queue, ckey, bucket, until_ms, task_id FROM cooldowns WHERE until_ms > ?
ORDER BY until_ms, queue, ckey, bucket

-- name: cooldown_lift
DELETE FROM cooldowns WHERE queue = ? AND ckey = ? AND bucket = ? AND until_ms > ?

-- fragment: task_bucket
-- The bucket a task counts against (the broker sets it at submit).
JSON_UNQUOTE(JSON_EXTRACT(metadata, '$."taskbroker.bucket"'))
