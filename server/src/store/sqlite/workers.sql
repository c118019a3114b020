-- name: lease_holders
-- `lease_expires_at >= 0` lets the partial index of leased rows serve the scan.
SELECT COALESCE(leased_by, ''), COALESCE(leased_address, ''), queue, COUNT(*),
  MIN(leased_at), MAX(updated_at) FROM tasks
WHERE state = 'leased' AND lease_expires_at >= 0
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 LIMIT ?;

-- name: worker_record_seen
-- ?1 id, ?2 labels (JSON), ?3 address, ?4 queues (JSON; NULL keeps the known
-- ones and labels), ?5 now.
INSERT INTO workers (worker_id, labels, address, queues, first_seen, last_seen)
VALUES (?1, ?2, ?3, COALESCE(?4, '[]'), ?5, ?5)
ON CONFLICT (worker_id) DO UPDATE SET
  labels = CASE WHEN ?4 IS NULL THEN workers.labels ELSE excluded.labels END,
  address = excluded.address, queues = COALESCE(?4, workers.queues),
  last_seen = MAX(workers.last_seen, excluded.last_seen);

-- name: worker_list_head
-- The workers seen since ? (the minute before now first, which `Workers::worker_list`
-- writes in as a number); it adds the filters, order and limit.
${worker_select} WHERE w.last_seen >= ?;

-- name: worker_get
-- ? the minute before now, ? the worker id.
${worker_select} WHERE w.worker_id = ?;

-- name: worker_get_leases
SELECT id, queue, attempt, leased_at, lease_expires_at FROM tasks
WHERE state = 'leased' AND leased_by = ? ORDER BY leased_at, seq LIMIT 1000;

-- fragment: worker_select
-- The registry row with its counts (`?` = the minute before now, bound first).
SELECT w.worker_id, w.labels, w.address, w.queues, w.first_seen,
  w.last_seen,
  (SELECT count(*) FROM tasks h WHERE h.state = 'leased' AND h.leased_by = w.worker_id)
    AS leases_held,
  (SELECT count(*) FROM task_attempts a WHERE a.finished_at >= m.since
    AND a.worker_id = w.worker_id AND a.outcome = 'succeeded') AS completed,
  (SELECT count(*) FROM task_attempts a WHERE a.finished_at >= m.since
    AND a.worker_id = w.worker_id AND a.outcome <> 'succeeded') AS failed
FROM (SELECT ? AS since) m, workers w
