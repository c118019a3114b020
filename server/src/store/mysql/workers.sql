-- fragment: worker_select
-- The registry row with its counts: leases held now, attempts finished since
-- the minute before now (bound twice: recent_attempts).
SELECT w.worker_id, w.labels, w.address, w.queues, w.first_seen,
  w.last_seen,
  (SELECT count(*) FROM tasks h WHERE h.state = 'leased' AND h.leased_by = w.worker_id)
    AS leases_held,
  CAST(COALESCE(p.completed, 0) AS SIGNED) AS completed,
  CAST(COALESCE(p.failed, 0) AS SIGNED) AS failed
FROM workers w LEFT JOIN (SELECT worker_id,
    SUM(outcome = 'succeeded') AS completed, SUM(outcome <> 'succeeded') AS failed
  FROM (${recent_attempts}) r GROUP BY worker_id) p ON p.worker_id = w.worker_id

-- name: lease_holders
SELECT COALESCE(leased_by, '') AS w, COALESCE(leased_address, '') AS a, queue,
  COUNT(*), MIN(leased_at), MAX(updated_at) FROM tasks
WHERE state = 'leased' GROUP BY w, a, queue ORDER BY w, a, queue LIMIT ?

-- piece: worker_record_seen
-- Followed by VALUES and one row of 7 placeholders per worker, then
-- worker_record_seen_tail.
INSERT INTO workers (worker_id, labels, address, queues, first_seen, last_seen,
queues_given)

-- piece: worker_record_seen_tail
-- own: MySQL takes no array parameter: the end of worker_record_seen, its multi-row upsert of workers built at run time
ON DUPLICATE KEY UPDATE
  labels = IF(VALUES(queues_given), VALUES(labels), labels),
  address = VALUES(address),
  queues = IF(VALUES(queues_given), VALUES(queues), queues),
  last_seen = GREATEST(last_seen, VALUES(last_seen))

-- name: worker_list_head
-- Followed by ` WHERE w.last_seen >= ?`, ` AND ...` per filter given, the
-- order and the limit.
${worker_select}

-- name: worker_get
${worker_select} WHERE w.worker_id = ?

-- name: worker_get_leases
SELECT id, queue, attempt, leased_at, lease_expires_at FROM tasks
WHERE state = 'leased' AND leased_by = ? ORDER BY leased_at, seq LIMIT 1000
