-- name: task_lease_gated_queues
-- What the gated lease knows of one queue: its settings and bucket.
SELECT config, tokens, refilled_at FROM queues WHERE name = ?1;

-- name: task_lease_gated_leased
SELECT count(*) FROM tasks WHERE queue = ?1 AND state = 'leased';

-- name: task_lease_gated_leased_per_key
SELECT concurrency_key, count(*) FROM tasks WHERE queue = ?1 AND state = 'leased'
AND concurrency_key IS NOT NULL GROUP BY concurrency_key;

-- name: task_lease_gated_key_tokens
-- The per-key buckets of queue ?1 for the keys ?2 (JSON).
SELECT key, tokens, refilled_at FROM queue_key_tokens WHERE queue = ?1
AND key IN (SELECT value FROM json_each(?2));

-- name: task_lease_gated_candidates
-- The candidate scan: READY tasks of the queue in effective lease order that
-- some request of the batch may take, leaving out closed keys and tasks
-- offered already, each with the requests that may take it. ?1 queue, ?2 now,
-- ?3 closed keys (JSON), ?4 seqs offered already (JSON), ?5 how many, ?6 aging
-- ms, ?7 the batch's workers (JSON), ?8 their labels (JSON). Without aging or
-- fairness the index order is the lease order: only the first rows are read.
SELECT seq, concurrency_key, eff, turn, COALESCE(deadline, 9223372036854775807), run_at,
  size, elig, fgroup FROM (SELECT seq, concurrency_key, deadline, run_at, eff, size,
  elig, fgroup, 1 AS turn FROM (SELECT seq, concurrency_key, deadline, run_at, eff,
  size, elig, fgroup, last, 1 AS krn
  FROM (SELECT seq, concurrency_key, deadline, run_at, priority + 0 * ?6 AS eff, 0 AS last,
    ${gated_row}
    ${gated_ready} LIMIT ?5)))
${gated_order};

-- name: task_lease_gated_candidates_aging
-- `task_lease_gated_candidates` with aging: every READY row of the queue is ranked.
SELECT seq, concurrency_key, eff, turn, COALESCE(deadline, 9223372036854775807), run_at,
  size, elig, fgroup FROM (SELECT seq, concurrency_key, deadline, run_at, eff, size,
  elig, fgroup, 1 AS turn FROM (SELECT seq, concurrency_key, deadline, run_at, eff,
  size, elig, fgroup, last, 1 AS krn
  FROM (SELECT seq, concurrency_key, deadline, run_at, ${gated_aged} AS eff, 0 AS last,
    ${gated_row}
    ${gated_ready})))
${gated_order};

-- name: task_lease_gated_candidates_round_robin
-- `task_lease_gated_candidates` with round robin by key: a key's n-th READY task takes its
-- turn in the n-th round, and within a round the key served longest ago
-- (`queue_key_turns`, kept across leases) goes first; `turn` is the task's
-- place in that order. Every READY row of the queue is ranked.
SELECT seq, concurrency_key, eff, turn, COALESCE(deadline, 9223372036854775807), run_at,
  size, elig, fgroup FROM (SELECT seq, concurrency_key, deadline, run_at, eff, size,
  elig, fgroup, ${gated_turn} AS turn FROM (SELECT seq, concurrency_key, deadline, run_at, eff,
  size, elig, fgroup, last, ${gated_key_round} AS krn
  FROM (SELECT seq, concurrency_key, deadline, run_at, priority + 0 * ?6 AS eff,
    ${gated_served} AS last,
    ${gated_row}
    ${gated_ready})))
${gated_order};

-- name: task_lease_gated_candidates_aging_round_robin
-- `task_lease_gated_candidates_round_robin` with aging.
SELECT seq, concurrency_key, eff, turn, COALESCE(deadline, 9223372036854775807), run_at,
  size, elig, fgroup FROM (SELECT seq, concurrency_key, deadline, run_at, eff, size,
  elig, fgroup, ${gated_turn} AS turn FROM (SELECT seq, concurrency_key, deadline, run_at, eff,
  size, elig, fgroup, last, ${gated_key_round} AS krn
  FROM (SELECT seq, concurrency_key, deadline, run_at, ${gated_aged} AS eff,
    ${gated_served} AS last,
    ${gated_row}
    ${gated_ready})))
${gated_order};

-- name: task_lease_gated_held
-- own: SQLite's gated lease counts a worker's leases with its own copy of routing_worker_held (MySQL's gated lease uses routing_worker_held)
-- The leases worker ?2 holds in queue ?1.
SELECT count(*) FROM tasks WHERE queue = ?1 AND state = 'leased' AND leased_by = ?2;

-- name: task_lease_gated_turns_counter
-- own: SQLite has no data-modifying CTEs, so the gated lease writes the round-robin turns and the bucket charges one statement each
SELECT served FROM queues WHERE name = ?1;

-- name: task_lease_gated_turns_put
-- own: SQLite has no data-modifying CTEs, so the gated lease writes the round-robin turns and the bucket charges one statement each
INSERT INTO queue_key_turns (queue, key, served) VALUES (?1, ?2, ?3)
ON CONFLICT (queue, key) DO UPDATE SET served = excluded.served;

-- name: task_lease_gated_turns_served
-- own: SQLite has no data-modifying CTEs, so the gated lease writes the round-robin turns and the bucket charges one statement each
UPDATE queues SET served = ?2 WHERE name = ?1;

-- name: task_lease_gated_read
-- own: SQLite has no data-modifying CTEs, so the gated lease reads the rows it granted after writing them
-- The rows granted (?1 their seqs, JSON).
SELECT ${task_columns} FROM tasks WHERE seq IN (SELECT value FROM json_each(?1));

-- name: task_lease_gated_charge
-- own: SQLite has no data-modifying CTEs, so the gated lease writes the round-robin turns and the bucket charges one statement each
UPDATE queues SET tokens = ?2, refilled_at = ?3 WHERE name = ?1;

-- name: task_lease_gated_charge_key
-- own: SQLite has no data-modifying CTEs, so the gated lease writes the round-robin turns and the bucket charges one statement each
INSERT INTO queue_key_tokens (queue, key, tokens, refilled_at)
VALUES (?1, ?2, ?3, ?4) ON CONFLICT (queue, key) DO UPDATE SET
tokens = excluded.tokens, refilled_at = excluded.refilled_at;

-- fragment: gated_row
-- A candidate's size, the requests that may take it (NULL: any), its group.
${reply_size} AS size,
    CASE WHEN ${gated_open} THEN NULL ELSE (SELECT json_group_array(r.key) FROM json_each(?7) r
      WHERE ${gated_may_take}) END AS elig,
    CASE WHEN fanout_distinct THEN fanout_group END AS fgroup

-- fragment: gated_ready
FROM tasks WHERE state = 'pending' AND waiting = 0 AND queue = ?1 AND run_at <= ?2
    AND (deadline IS NULL OR deadline > ?2)
    AND (concurrency_key IS NULL OR concurrency_key NOT IN (SELECT value FROM json_each(?3)))
    AND seq NOT IN (SELECT value FROM json_each(?4))
    AND (${gated_open} OR EXISTS (SELECT 1 FROM json_each(?7) r WHERE ${gated_may_take}))
    ORDER BY ${lease_order}

-- fragment: gated_order
ORDER BY eff DESC, turn, deadline IS NULL, deadline, run_at, seq LIMIT ?5

-- fragment: gated_aged
priority + MAX(?2 - run_at, 0) / ?6

-- fragment: gated_served
COALESCE((SELECT k.served FROM queue_key_turns k WHERE k.queue = ?1
      AND k.key = COALESCE(tasks.concurrency_key, '')), 0)

-- fragment: gated_key_round
row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff
    ORDER BY deadline IS NULL, deadline, run_at, seq)

-- fragment: gated_turn
row_number() OVER (PARTITION BY eff
    ORDER BY krn, last, deadline IS NULL, deadline, run_at, seq)

-- fragment: gated_open
-- Routing: a row anyone may take (no target, no reservation, no distinct
-- fan-out group), read from its own columns.
(target_worker IS NULL AND target_labels IS NULL
  AND reserved_for IS NULL AND fanout_distinct = 0)

-- fragment: gated_may_take
-- Routing: whether the worker of request `r` (a row of `json_each(?7)`: `r.key`
-- its index, `r.value` its id; its labels at the same index of ?8) may take the
-- row: its target, a retry reserved for another worker, a distinct fan-out copy
-- of a group the worker holds or completed.
((target_worker IS NULL OR target_worker = r.value)
  AND (target_labels IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(tasks.target_labels) j
    WHERE j.value IS NOT (SELECT w.value FROM json_each(?8, '$[' || r.key || ']') w
      WHERE w.key = j.key)))
  AND (reserved_for IS NULL OR reserved_for = r.value OR reserved_until <= ?2)
  AND (fanout_distinct = 0 OR NOT EXISTS (SELECT 1 FROM tasks c
      WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = r.value
        AND c.state IN ('leased', 'succeeded'))))
