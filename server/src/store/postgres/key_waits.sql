-- Dependencies by key at submit: who holds the keys, and the cap on waits.

-- name: key_waits_holders
-- The tasks that hold the keys ($1 queues, $2 keys), with their producers.
SELECT t.queue, t.key, t.id, t.metadata::jsonb ->> 'taskbroker.producer' FROM tasks t
JOIN UNNEST($1::text[], $2::text[]) AS u(queue, key)
  ON t.queue = u.queue AND t.key = u.key

-- name: key_waits_count
-- The unbound waits on the key ($1, $2) of the producer $3, counted no further
-- than the cap $4 (one index probe).
SELECT count(*) FROM (SELECT 1 FROM task_key_deps WHERE queue = $1 AND key = $2
AND producer = $3 AND bound_to IS NULL LIMIT $4) w

-- name: task_insert_flow_key_waits_of_none
-- own: Postgres's null-safe IS NOT DISTINCT FROM takes no index, so the count of waits of no producer is its own statement
-- As key_waits_count, of no producer ($3 NULL): the NULL case
-- is a separate index condition.
SELECT count(*) FROM (SELECT 1 FROM task_key_deps WHERE queue = $1 AND key = $2
AND producer IS NULL AND $3::text IS NULL AND bound_to IS NULL LIMIT $4) w
