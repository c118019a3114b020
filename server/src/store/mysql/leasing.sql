-- fragment: lease_order
priority DESC, lease_deadline, run_at, seq

-- name: lease_plain_pick
-- own: MySQL has no UPDATE ... RETURNING, so the lease picks the rows first (FOR UPDATE SKIP LOCKED) with every column its reply needs, then writes them by seq
-- One queue's first candidates the worker may take, in lease order, locked;
-- rows another job holds are skipped. Binds the queue, now, now, the routing
-- predicate's five (routing.sql), the window and its offset, then now, now, the
-- routing predicate's five again, and the limit. The window of candidates
-- comes from a consistent read, in lease order (the derived table: a locking
-- clause does not reach into it); its rows are then locked by primary key in
-- that order and tested again under the lock (a row leased or changed since
-- the read fails the test), until the limit is locked. A consistent read
-- passes over the index entries that recent leases left delete-marked at the
-- head of the queue (until purge removes them) without visiting their rows; a
-- locking read of the same range looks up the row of every one of them, about
-- three pages each: thousands per lease when leases run at thousands a second.
-- The rows come whole: the lease writes them by seq and answers with them as
-- its UPDATE leaves them.
SELECT ${task_columns}, lease_deadline,
  CAST(${reply_size} AS SIGNED) AS size,
  CASE WHEN fanout_distinct THEN fanout_group END AS fgroup
FROM (SELECT seq AS cand FROM tasks WHERE state = 'pending' AND queue = ?
    AND run_at <= ? AND lease_deadline > ? AND ${routing_may_take}
  ORDER BY ${lease_order} LIMIT ? OFFSET ?) c
STRAIGHT_JOIN tasks ON tasks.seq = c.cand
WHERE state = 'pending' AND run_at <= ? AND lease_deadline > ? AND ${routing_may_take}
LIMIT ? FOR UPDATE SKIP LOCKED

-- name: lease_plain_window
-- own: MySQL has no UPDATE ... RETURNING, so the lease picks the rows first (FOR UPDATE SKIP LOCKED), and a pick that came back short asks whether it skipped rows another job holds
-- How many candidates lease_plain_pick's windows had, up to the limit (a
-- consistent read). Binds the queue, now, now, the routing predicate's five,
-- the limit.
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = 'pending' AND queue = ?
    AND run_at <= ? AND lease_deadline > ? AND ${routing_may_take} LIMIT ?) w

-- piece: lease_plain_write
-- own: MySQL has no UPDATE ... RETURNING, so the lease picks the rows first (FOR UPDATE SKIP LOCKED), then writes them by seq
-- Leases pending tasks by seq; followed by one placeholder per seq, then `)`.
-- The lease token is the batch's random prefix and the row's seq.
UPDATE tasks SET state = 'leased', attempt = attempt + 1,
fencing_token = fencing_token + 1, lease_token = CONCAT(?, '.', seq), leased_by = ?,
lease_duration_ms = ?, lease_expires_at = LEAST(?, COALESCE(deadline, 9223372036854775807)),
updated_at = ?, leased_at = ?, leased_address = ?
WHERE state = 'pending' AND seq IN (

-- piece: lease_plain_read
-- own: MySQL has no UPDATE ... RETURNING, so the gated lease, whose candidates are partial rows, reads the rows it leased back
-- Followed by one placeholder per seq, then `)`.
SELECT ${task_columns} FROM tasks WHERE lease_token = CONCAT(?, '.', seq) AND seq IN (

-- piece: task_lease_many_available
-- own: MySQL leases a batch request by request, so it counts the READY tasks first to share them out; Postgres's one lease statement shares them by slot
-- How many READY tasks the queues have, up to the demand: followed by one
-- placeholder per queue, then task_lease_many_available_tail.
SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = 'pending' AND queue IN (

-- piece: task_lease_many_available_tail
-- own: MySQL takes no array parameter: the end of task_lease_many_available, after its list of queues
) AND run_at <= ? AND lease_deadline > ? LIMIT ?) x

-- piece: task_next_run_at
-- Followed by one placeholder per queue, then task_next_run_at_tail.
SELECT MIN(run_at) FROM tasks WHERE state = 'pending' AND queue IN (

-- piece: task_next_run_at_tail
-- own: MySQL takes no array parameter: the end of task_next_run_at, after its list of queues
) AND run_at > ?

-- name: lease_extend_pick
-- own: MySQL has no UPDATE ... RETURNING, so the extension reads the live lease (FOR UPDATE), then writes it by seq
SELECT seq, LEAST(? + COALESCE(?, lease_duration_ms),
  COALESCE(deadline, 9223372036854775807)), cancel_requested FROM tasks
WHERE id = ? AND state = 'leased' AND lease_token = ? AND lease_expires_at > ?
  AND (deadline IS NULL OR deadline > ?) FOR UPDATE

-- name: lease_extend_write
UPDATE tasks SET lease_expires_at = ?, updated_at = ? WHERE seq = ?

-- name: lease_release_pick
-- own: MySQL has no UPDATE ... RETURNING, so the release reads the lease (FOR UPDATE), then writes it by seq
SELECT seq, queue, attempt, run_at FROM tasks
WHERE id = ? AND state = 'leased' AND lease_token = ? FOR UPDATE

-- name: lease_release
UPDATE tasks SET state = 'pending', attempt = attempt - 1, lease_token = NULL,
leased_by = NULL, lease_duration_ms = NULL, lease_expires_at = NULL,
leased_at = NULL, leased_address = NULL, updated_at = ? WHERE seq = ?
