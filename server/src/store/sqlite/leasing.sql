-- name: lease_promote
-- own: SQLite keeps scheduled tasks out of the lease index with the waiting flag (tasks_waiting), so due ones are promoted; MySQL's lease index orders by run_at
-- Clears `waiting` on the pending tasks of queue ?1 due at ?2 (through
-- `tasks_waiting`, which holds only scheduled tasks).
UPDATE tasks SET waiting = 0 WHERE state = 'pending' AND waiting = 1
AND queue = ?1 AND run_at <= ?2;

-- name: lease_plain_pick
-- own: SQLite leases by a SELECT then a single-row UPDATE by rowid, read back by rowid: UPDATE ... RETURNING in the writer's job savepoint costs too much (see leasing.rs)
-- One queue's first candidates in lease order: ?1 worker, ?2 queue, ?3 the
-- worker's labels (JSON), ?4 now, ?5 how many at most. Routing: passes over the
-- tasks this worker may not take.
SELECT seq, priority, deadline, run_at,
  ${reply_size} AS size,
  CASE WHEN fanout_distinct THEN fanout_group END AS fgroup
FROM tasks WHERE state = 'pending' AND waiting = 0 AND queue = ?2 AND run_at <= ?4
AND (deadline IS NULL OR deadline > ?4) AND ${routing_may_take}
ORDER BY ${lease_order} LIMIT ?5;

-- name: lease_plain_write
-- own: SQLite leases by a SELECT then a single-row UPDATE by rowid, read back by rowid: UPDATE ... RETURNING in the writer's job savepoint costs too much (see leasing.rs)
-- Leases one READY task by rowid (no RETURNING: see `leasing`), for the plain
-- lease and the gated one: ?1 worker, ?2 lease duration ms, ?3 expiry before the
-- deadline cap, ?4 now, ?5 worker address, ?6 seq.
UPDATE tasks SET state = 'leased', attempt = attempt + 1,
  fencing_token = fencing_token + 1, lease_token = lower(hex(randomblob(16))),
  leased_by = ?1, lease_duration_ms = ?2,
  lease_expires_at = MIN(?3, COALESCE(deadline, 9223372036854775807)), updated_at = ?4,
  leased_at = ?4, leased_address = ?5
WHERE seq = ?6 AND state = 'pending';

-- name: lease_plain_read
-- own: SQLite leases by a SELECT then a single-row UPDATE by rowid, read back by rowid: UPDATE ... RETURNING in the writer's job savepoint costs too much (see leasing.rs)
-- A task just leased, by rowid.
SELECT ${task_columns} FROM tasks WHERE seq = ?1;

-- name: task_lease_many_available
-- own: SQLite leases a batch request by request, so it counts the READY tasks first to share them out; Postgres's one lease statement shares them by slot
-- The READY tasks of the queues (?3 and on, one per queue) due at ?1, ?2 at most.
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = 'pending' AND waiting = 0
AND queue IN (?3) AND run_at <= ?1 AND (deadline IS NULL OR deadline > ?1) LIMIT ?2);

-- name: lease_extend_pick
-- own: SQLite's one writer reads the live lease and its new expiry, then writes it by seq
-- The lease, if live, with its new expiry (?1 now, ?2 extend by ms or NULL for
-- its own duration, ?3 id, ?4 token).
SELECT seq, MIN(?1 + COALESCE(?2, lease_duration_ms),
  COALESCE(deadline, 9223372036854775807)), cancel_requested FROM tasks
WHERE id = ?3 AND state = 'leased' AND lease_token = ?4 AND lease_expires_at > ?1
  AND (deadline IS NULL OR deadline > ?1);

-- name: lease_extend_write
UPDATE tasks SET lease_expires_at = ?1, updated_at = ?2 WHERE seq = ?3;

-- name: task_next_run_at
-- The first entry of tasks_waiting after ?2, queue by queue (?1 the queues,
-- JSON; a MIN over several queues at once would read every entry after now).
SELECT MIN((SELECT run_at FROM tasks WHERE state = 'pending' AND waiting = 1
  AND queue = q.value AND run_at > ?2 ORDER BY run_at LIMIT 1)) FROM json_each(?1) q;

-- name: lease_release
-- The attempt is taken back (it never ran, and no attempt row was written for
-- it: that happens when an attempt ends); the fencing token is not.
UPDATE tasks SET state = 'pending', attempt = attempt - 1, lease_token = NULL,
  leased_by = NULL, lease_duration_ms = NULL, lease_expires_at = NULL, leased_at = NULL,
  leased_address = NULL, updated_at = ?1
WHERE id = ?2 AND state = 'leased' AND lease_token = ?3
RETURNING queue, attempt, run_at;

-- fragment: lease_order
priority DESC, deadline IS NULL, deadline, run_at, seq

-- fragment: reply_size
-- The reply bound of the `tasks` row in scope (`crate::store::reply::size_sql`).
(octet_length(id) + octet_length(queue) + COALESCE(octet_length(key), 0)
 + octet_length(payload) + COALESCE(octet_length(checkpoint), 0)
 + octet_length(metadata) + octet_length(metadata) / 16
 + COALESCE(octet_length(concurrency_key), 0) + COALESCE(octet_length(fanout_group), 0) + 197)
