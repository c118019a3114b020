-- fragment: gated_columns
seq, concurrency_key, lease_deadline, run_at, size, target_worker,
target_labels, reserved_for, reserved_until, fanout_distinct, fanout_group

-- fragment: gated_row_columns
seq, concurrency_key, lease_deadline, run_at,
CAST(${reply_size} AS SIGNED) AS size, target_worker, target_labels, reserved_for,
reserved_until, fanout_distinct, fanout_group

-- fragment: aged_priority
-- The effective priority with aging: binds now, then the aging step (ms).
CAST(priority + FLOOR(GREATEST(? - run_at, 0) / ?) AS SIGNED)

-- fragment: fair_last
-- Round robin: when the task's key was served last.
COALESCE((SELECT k.served FROM queue_key_turns k WHERE k.queue = tasks.queue
AND k.`key` = COALESCE(tasks.concurrency_key, '')), 0)

-- fragment: fair_key_round
-- Round robin: a key's n-th READY task takes its turn in the n-th round.
row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff
ORDER BY lease_deadline, run_at, seq)

-- fragment: fair_turn
-- Round robin: within a round, the key served longest ago goes first.
row_number() OVER (PARTITION BY eff
ORDER BY krn, last, lease_deadline, run_at, seq)

-- name: task_lease_gated_queues
-- The queue's settings and bucket, its row locked until the job ends.
SELECT config, tokens, refilled_at FROM queues WHERE name = ? FOR UPDATE

-- name: task_lease_gated_leased
SELECT count(*) FROM tasks WHERE state = 'leased' AND queue = ?

-- name: task_lease_gated_leased_per_key
-- `keyed_state` is the state of a task with a concurrency key (migration 0012).
SELECT concurrency_key, count(*) FROM tasks WHERE keyed_state = 'leased' AND queue = ?
GROUP BY concurrency_key

-- piece: task_lease_gated_key_tokens
-- The per-key buckets of a queue: followed by one placeholder per key, then `)`.
SELECT `key`, tokens, refilled_at FROM queue_key_tokens WHERE queue = ? AND `key` IN (

-- piece: task_lease_gated_candidates
-- The candidate scan, READY tasks of a queue in effective lease order:
-- followed by the lists of closed keys and of tasks offered already,
-- lease_gated_candidates_order, ` LIMIT ?` (here only), lease_gated_candidates_tail.
SELECT ${gated_columns}, eff, CAST(turn AS SIGNED) AS turn FROM (SELECT ${gated_columns}, eff,
  1 AS turn FROM (SELECT ${gated_columns}, eff, last, 1 AS krn FROM (
  SELECT ${gated_row_columns}, priority AS eff, 0 AS last FROM tasks
  WHERE state = 'pending' AND queue = ? AND run_at <= ? AND lease_deadline > ?

-- piece: task_lease_gated_candidates_round_robin
-- task_lease_gated_candidates for round robin by key.
SELECT ${gated_columns}, eff, CAST(turn AS SIGNED) AS turn FROM (SELECT ${gated_columns}, eff,
  ${fair_turn} AS turn FROM (SELECT ${gated_columns}, eff, last, ${fair_key_round} AS krn FROM (
  SELECT ${gated_row_columns}, priority AS eff, ${fair_last} AS last FROM tasks
  WHERE state = 'pending' AND queue = ? AND run_at <= ? AND lease_deadline > ?

-- piece: task_lease_gated_candidates_aging
-- task_lease_gated_candidates with aging (binds now and the aging step first).
SELECT ${gated_columns}, eff, CAST(turn AS SIGNED) AS turn FROM (SELECT ${gated_columns}, eff,
  1 AS turn FROM (SELECT ${gated_columns}, eff, last, 1 AS krn FROM (
  SELECT ${gated_row_columns}, ${aged_priority} AS eff, 0 AS last FROM tasks
  WHERE state = 'pending' AND queue = ? AND run_at <= ? AND lease_deadline > ?

-- piece: task_lease_gated_candidates_aging_round_robin
-- task_lease_gated_candidates with round robin and aging (binds now and the aging step first).
SELECT ${gated_columns}, eff, CAST(turn AS SIGNED) AS turn FROM (SELECT ${gated_columns}, eff,
  ${fair_turn} AS turn FROM (SELECT ${gated_columns}, eff, last, ${fair_key_round} AS krn FROM (
  SELECT ${gated_row_columns}, ${aged_priority} AS eff, ${fair_last} AS last FROM tasks
  WHERE state = 'pending' AND queue = ? AND run_at <= ? AND lease_deadline > ?

-- piece: lease_gated_candidates_order
-- own: MySQL takes no array parameter, so the candidate scan is joined at run time around its lists of closed keys and offered tasks
ORDER BY ${lease_order}

-- piece: lease_gated_candidates_tail
-- own: MySQL takes no array parameter, so the candidate scan is joined at run time around its lists of closed keys and offered tasks
) a) b) c ORDER BY eff DESC, turn, lease_deadline, run_at, seq LIMIT ?

-- name: task_lease_gated_turns_counter
-- own: MySQL has no data-modifying CTEs and no UPDATE ... RETURNING, so the gated lease reads the turn counter and writes turns and bucket charges one statement each
SELECT served FROM queues WHERE name = ?

-- name: task_lease_gated_turns_put
-- own: MySQL has no data-modifying CTEs and no UPDATE ... RETURNING, so the gated lease reads the turn counter and writes turns and bucket charges one statement each
-- Round robin: when the key was served.
INSERT INTO queue_key_turns (queue, `key`, served) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE served = VALUES(served)

-- name: task_lease_gated_turns_served
-- own: MySQL has no data-modifying CTEs and no UPDATE ... RETURNING, so the gated lease reads the turn counter and writes turns and bucket charges one statement each
UPDATE queues SET served = ? WHERE name = ?

-- name: task_lease_gated_charge
-- own: MySQL has no data-modifying CTEs and no UPDATE ... RETURNING, so the gated lease reads the turn counter and writes turns and bucket charges one statement each
-- One token per lease granted, from the queue's bucket.
UPDATE queues SET tokens = ?, refilled_at = ? WHERE name = ?

-- name: task_lease_gated_charge_key
-- own: MySQL has no data-modifying CTEs and no UPDATE ... RETURNING, so the gated lease reads the turn counter and writes turns and bucket charges one statement each
-- One token per lease granted, from the key's bucket.
INSERT INTO queue_key_tokens (queue, `key`, tokens, refilled_at)
VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE
tokens = VALUES(tokens), refilled_at = VALUES(refilled_at)
