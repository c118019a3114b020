-- name: queue_pending
-- The waiting tasks (pending or blocked) of a queue and the sum of their payload bytes.
SELECT CAST(COUNT(*) AS SIGNED), CAST(COALESCE(SUM(LENGTH(payload)), 0) AS SIGNED)
FROM tasks WHERE queue = ? AND state IN ('pending', 'blocked')

-- name: queue_dead_letters_set_clear
DELETE FROM queue_dead_letters

-- name: queue_dead_letters_set_insert
INSERT INTO queue_dead_letters (queue, dead_letter_queue) VALUES (?, ?)

-- name: queue_list
SELECT name, config, updated_at, version FROM queues ORDER BY name

-- name: queue_seed_delete
-- The seeded settings no longer seeded: followed by ` AND name NOT IN (...)`
-- when some are.
DELETE FROM queues WHERE updated_at IS NULL

-- name: queue_seed_lock
-- own: MySQL's INSERT ... ON DUPLICATE KEY UPDATE takes no WHERE, so the seed locks the row, then inserts it or updates it if never put
SELECT config, updated_at FROM queues WHERE name = ? FOR UPDATE

-- name: queue_seed_insert
-- own: MySQL's INSERT ... ON DUPLICATE KEY UPDATE takes no WHERE, so the seed locks the row, then inserts it or updates it if never put
INSERT IGNORE INTO queues (name, config) VALUES (?, ?)

-- name: queue_seed_update
-- own: MySQL's INSERT ... ON DUPLICATE KEY UPDATE takes no WHERE, so the seed locks the row, then inserts it or updates it if never put
UPDATE queues SET config = ?, version = version + 1 WHERE name = ?
AND updated_at IS NULL

-- name: queue_put_insert
INSERT IGNORE INTO queues (name, config, updated_at, version) VALUES (?, ?, ?, 1)

-- name: queue_put_update
UPDATE queues SET config = ?, updated_at = ?, version = version + 1
WHERE name = ? AND version = ?

-- name: queue_usage_queue
SELECT config, tokens, refilled_at FROM queues WHERE name = ?

-- name: queue_usage_leased
SELECT count(*) FROM tasks WHERE state = 'leased' AND queue = ?

-- name: queue_usage_key_holders
-- `keyed_state` is the state of a task with a concurrency key (migration 0012).
SELECT id FROM tasks WHERE keyed_state = 'leased' AND queue = ?
AND concurrency_key = ? ORDER BY seq LIMIT 100

-- name: queue_usage_key_tokens
SELECT tokens, refilled_at FROM queue_key_tokens WHERE queue = ? AND `key` = ?

-- name: task_ahead_config
SELECT config FROM queues WHERE name = ?

-- name: task_ahead
-- The READY tasks ranked as the gated lease ranks them, counted up to the
-- task's own place.
WITH r AS (SELECT seq, eff, last, lease_deadline AS dl, run_at, 1 AS krn
  FROM (SELECT seq, concurrency_key, lease_deadline, run_at, priority AS eff,
    0 AS last FROM tasks WHERE state = 'pending' AND queue = ? AND run_at <= ?
    AND lease_deadline > ?) x)
SELECT count(*) FROM r, r m WHERE m.seq = ? AND r.seq <> m.seq
  AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq)
    < (m.krn, m.last, m.dl, m.run_at, m.seq)))

-- name: task_ahead_fair
-- own: MySQL's ? placeholders cannot be named twice, so each ranking (round robin, aging) is its own statement instead of flags bound once
-- task_ahead for round robin by key.
WITH r AS (SELECT seq, eff, last, lease_deadline AS dl, run_at, ${fair_key_round} AS krn
  FROM (SELECT seq, concurrency_key, lease_deadline, run_at, priority AS eff,
    ${fair_last} AS last FROM tasks WHERE state = 'pending' AND queue = ? AND run_at <= ?
    AND lease_deadline > ?) x)
SELECT count(*) FROM r, r m WHERE m.seq = ? AND r.seq <> m.seq
  AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq)
    < (m.krn, m.last, m.dl, m.run_at, m.seq)))

-- name: task_ahead_aged
-- own: MySQL's ? placeholders cannot be named twice, so each ranking (round robin, aging) is its own statement instead of flags bound once
-- task_ahead with aging (binds now and the aging step first).
WITH r AS (SELECT seq, eff, last, lease_deadline AS dl, run_at, 1 AS krn
  FROM (SELECT seq, concurrency_key, lease_deadline, run_at, ${aged_priority} AS eff,
    0 AS last FROM tasks WHERE state = 'pending' AND queue = ? AND run_at <= ?
    AND lease_deadline > ?) x)
SELECT count(*) FROM r, r m WHERE m.seq = ? AND r.seq <> m.seq
  AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq)
    < (m.krn, m.last, m.dl, m.run_at, m.seq)))

-- name: task_ahead_fair_aged
-- own: MySQL's ? placeholders cannot be named twice, so each ranking (round robin, aging) is its own statement instead of flags bound once
-- task_ahead with round robin and aging (binds now and the aging step first).
WITH r AS (SELECT seq, eff, last, lease_deadline AS dl, run_at, ${fair_key_round} AS krn
  FROM (SELECT seq, concurrency_key, lease_deadline, run_at, ${aged_priority} AS eff,
    ${fair_last} AS last FROM tasks WHERE state = 'pending' AND queue = ? AND run_at <= ?
    AND lease_deadline > ?) x)
SELECT count(*) FROM r, r m WHERE m.seq = ? AND r.seq <> m.seq
  AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq)
    < (m.krn, m.last, m.dl, m.run_at, m.seq)))

-- name: queue_key_tokens_purge_queues
-- own: MySQL runs the purge in one job's transaction, so it reads the queues' configs inside it, not through queue_list
SELECT name, config FROM queues

-- name: queue_key_tokens_purge_full
-- A rate-limited queue's per-key buckets full again at now.
DELETE FROM queue_key_tokens WHERE queue = ?
AND tokens + GREATEST(? - refilled_at, 0) * ? / 1000.0 >= ?

-- name: queue_key_tokens_purge_unlimited
-- The buckets of queues without a per-key rate limit: followed by
-- ` WHERE queue NOT IN (...)` of the limited ones, when there are some.
DELETE FROM queue_key_tokens

-- name: queue_key_tokens_purge_unfair
-- own: MySQL takes no array parameter, so the turns of queues without round robin go in their own DELETE with a NOT IN list built at run time
-- The turns of queues without round robin: followed by
-- ` WHERE queue NOT IN (...)` of the fair ones, when there are some.
DELETE FROM queue_key_turns

-- name: queue_key_tokens_purge_turns
-- A fair queue's turns no longer needed.
DELETE FROM queue_key_turns WHERE queue = ?
AND served < (SELECT served FROM queues WHERE name = ?) - ?
