-- The worker registry and the lease holders.

-- name: lease_holders
SELECT COALESCE(leased_by, ''), COALESCE(leased_address, ''), queue, COUNT(*),
  MIN(leased_at), MAX(updated_at) FROM tasks
WHERE state = 'leased' AND lease_expires_at >= 0
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 LIMIT $1

-- name: worker_record_seen
-- One row per worker id (the last seen wins), in id order so two replicas
-- upserting the same workers lock rows in the same order. Empty queues (a
-- Heartbeat) keep the stored labels and queues.
INSERT INTO workers (worker_id, labels, address, queues, first_seen, last_seen)
SELECT DISTINCT ON (id) id, l, a, COALESCE(q, '[]'), n, n
FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[])
  AS u(id, l, a, q, n)
ORDER BY id, n DESC
ON CONFLICT (worker_id) DO UPDATE SET
  labels = CASE WHEN excluded.queues = '[]' THEN workers.labels ELSE excluded.labels END,
  address = excluded.address,
  queues = CASE WHEN excluded.queues = '[]' THEN workers.queues ELSE excluded.queues END,
  last_seen = GREATEST(workers.last_seen, excluded.last_seen)

-- name: worker_list_head
-- The start of the list ($1: a minute before now); the filters and the page
-- follow (workers.rs).
${worker_select}

-- name: worker_get
-- One worker ($2), with its counts since $1.
${worker_select} WHERE w.worker_id = $2

-- name: worker_get_leases
SELECT id, queue, attempt, leased_at, lease_expires_at FROM tasks
WHERE state = 'leased' AND leased_by = $1 ORDER BY leased_at, seq LIMIT 1000

-- fragment: worker_select
-- The registry row with its counts: leases held now, attempts finished since
-- $1 (a minute before now).
${recent_attempts}, per_worker AS (SELECT worker_id,
  count(*) FILTER (WHERE outcome = 'succeeded') AS completed,
  count(*) FILTER (WHERE outcome <> 'succeeded') AS failed
  FROM recent GROUP BY worker_id)
SELECT w.worker_id, w.labels, w.address, w.queues, w.first_seen, w.last_seen,
(SELECT count(*) FROM tasks h WHERE h.state = 'leased' AND h.leased_by = w.worker_id)
  AS leases_held,
COALESCE(p.completed, 0) AS completed, COALESCE(p.failed, 0) AS failed
FROM workers w LEFT JOIN per_worker p ON p.worker_id = w.worker_id
