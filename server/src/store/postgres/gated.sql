-- The gated lease (admission gates): the queue rows locked, the leases
-- counted, the candidates scanned, the leases and bucket charges written.

-- name: task_lease_gated_queues
-- The serialisation point (see admission.rs): the gated queues' rows, locked in
-- name order.
SELECT name, config, tokens, refilled_at FROM queues WHERE name = ANY($1)
ORDER BY name FOR UPDATE

-- name: task_lease_gated_leased
SELECT count(*) FROM tasks WHERE queue = $1 AND state = 'leased'

-- name: task_lease_gated_leased_per_key
SELECT concurrency_key, count(*) FROM tasks WHERE queue = $1 AND state = 'leased'
AND concurrency_key IS NOT NULL GROUP BY concurrency_key

-- name: task_lease_gated_held
-- own: Postgres counts the leases of every worker of the batch in one statement over arrays
-- Leases each worker $1 holds in its queue $2 (routing's per-worker caps).
SELECT p.w, p.q, (SELECT count(*) FROM tasks WHERE state = 'leased'
  AND leased_by = p.w AND queue = p.q) FROM UNNEST($1::text[], $2::text[]) AS p(w, q)

-- name: task_lease_gated_key_tokens
SELECT key, tokens, refilled_at FROM queue_key_tokens WHERE queue = $1
AND key = ANY($2::text[])

-- name: task_lease_gated_candidates
-- The candidate scan without aging or fairness: READY tasks of the queue $1
-- in lease order at $2 that some request of the batch (workers $7, labels $8)
-- may take, leaving out the closed keys $3 and the tasks offered already ($4),
-- at most $5, each with the requests that may take it (0-based; NULL: all).
-- The index order is the lease order: only the first rows are read ($6, the
-- aging step, is unused).
${gated_candidates_select} 1::bigint AS turn ${gated_candidates_rank} 1::bigint AS krn
${gated_candidates_row} priority + 0 * $6 AS eff, 0::bigint AS last,
${gated_candidates_scan} ORDER BY ${lease_order} LIMIT $5${gated_candidates_order}

-- name: task_lease_gated_candidates_aging
-- As task_lease_gated_candidates with aging (a step of priority per $6 ms
-- waited): every READY row of the queue is ranked.
${gated_candidates_select} 1::bigint AS turn ${gated_candidates_rank} 1::bigint AS krn
${gated_candidates_row} priority + GREATEST($2 - run_at, 0) / $6 AS eff, 0::bigint AS last,
${gated_candidates_scan}${gated_candidates_order}

-- name: task_lease_gated_candidates_round_robin
-- As task_lease_gated_candidates with round robin: a key's n-th READY task
-- takes its turn in the n-th round, and within a round the key served longest
-- ago (`queue_key_turns`, kept across leases and replicas) goes first. `turn`
-- is the task's place in that order. Every READY row of the queue is ranked.
${gated_candidates_select} ${gated_turn} AS turn ${gated_candidates_rank} ${gated_key_round} AS krn
${gated_candidates_row} priority + 0 * $6 AS eff, ${gated_last_served} AS last,
${gated_candidates_scan}${gated_candidates_order}

-- name: task_lease_gated_candidates_aging_round_robin
-- With aging and round robin.
${gated_candidates_select} ${gated_turn} AS turn ${gated_candidates_rank} ${gated_key_round} AS krn
${gated_candidates_row} priority + GREATEST($2 - run_at, 0) / $6 AS eff, ${gated_last_served} AS last,
${gated_candidates_scan}${gated_candidates_order}

-- name: task_lease_gated_write
-- own: Postgres writes the gated leases, the bucket charges and the LEASED events in one statement, with data-modifying CTEs
-- One statement: the leases (`leased`, each row re-checked as pending, so a
-- task a plain lease took meanwhile is skipped) of the tasks $1 for the
-- requests $3 (1-based), then one token per lease taken from its queue's
-- bucket (`bucket`: queues $7 with their tokens before $8) and its key's
-- (`key_bucket`: $9, $10, $11), and (flow) the LEASED events (`ev`).
WITH picked AS (SELECT * FROM UNNEST($1::text[], $3::int[]) AS p(id, req)), ${lease_write}, bucket AS (
  UPDATE queues q SET refilled_at = $2,
    tokens = b.tokens - (SELECT count(*) FROM leased l WHERE l.queue = q.name)
  FROM UNNEST($7::text[], $8::float8[]) AS b(name, tokens) WHERE q.name = b.name),
key_bucket AS (
  INSERT INTO queue_key_tokens (queue, key, tokens, refilled_at)
  SELECT l.queue, l.concurrency_key, b.tokens - count(*), $2 FROM leased l
  JOIN UNNEST($9::text[], $10::text[], $11::float8[]) AS b(queue, key, tokens)
    ON b.queue = l.queue AND b.key = l.concurrency_key
  GROUP BY l.queue, l.concurrency_key, b.tokens
  ON CONFLICT (queue, key) DO UPDATE SET tokens = EXCLUDED.tokens,
    refilled_at = EXCLUDED.refilled_at)
SELECT * FROM leased

-- name: task_lease_gated_turns
-- own: Postgres takes the turn numbers from the queue's counter and writes the turns in one statement, with a data-modifying CTE
-- Round robin: the keys $2 served by a lease of the queue $1 (at places $3 of
-- $4 grants), each taking the next number of the queue's counter.
WITH c AS (UPDATE queues SET served = served + $4 WHERE name = $1
  RETURNING served - $4 AS base)
INSERT INTO queue_key_turns (queue, key, served)
SELECT $1, k.key, c.base + k.at FROM c, UNNEST($2::text[], $3::bigint[]) AS k(key, at)
ON CONFLICT (queue, key) DO UPDATE SET served = EXCLUDED.served

-- fragment: gated_size
-- The reply bound of the row (store/reply.rs, `size_sql`): its variable fields
-- and the fixed bytes of an entry (domain/reply.rs, TASK_FIXED_BYTES; a test
-- in gated.rs holds the two equal).
(${reply_size_fields} + 197)

-- fragment: gated_candidates_select
SELECT id, seq, concurrency_key, eff, turn, COALESCE(deadline, 9223372036854775807) AS dl,
  run_at, size, elig, fgroup FROM (SELECT id, seq, concurrency_key, deadline, run_at, eff,
  size, elig, fgroup,

-- fragment: gated_candidates_rank
FROM (SELECT id, seq, concurrency_key, deadline, run_at,
  eff, size, elig, fgroup, last,

-- fragment: gated_candidates_row
FROM (SELECT id, seq, concurrency_key, deadline,
  run_at,

-- fragment: gated_candidates_scan
${gated_size}::bigint AS size,
  CASE WHEN ${gated_open} THEN NULL ELSE ARRAY(SELECT i - 1
    FROM generate_subscripts($7::text[], 1) AS i WHERE ${gated_may_take} ORDER BY i) END AS elig,
  CASE WHEN fanout_distinct THEN fanout_group END AS fgroup
  FROM tasks WHERE state = 'pending' AND NOT waiting AND queue = $1 AND run_at <= $2
  AND COALESCE(deadline, 9223372036854775807) > $2
  AND (concurrency_key IS NULL
    OR concurrency_key NOT IN (SELECT unnest($3::text[])))
  AND seq NOT IN (SELECT unnest($4::bigint[]))
  AND (${gated_open} OR EXISTS (SELECT 1 FROM generate_subscripts($7::text[], 1) AS i
    WHERE ${gated_may_take}))

-- fragment: gated_candidates_order
) a) k) b
ORDER BY eff DESC, turn, deadline ASC NULLS LAST, run_at, seq LIMIT $5

-- fragment: gated_last_served
COALESCE((SELECT k.served FROM queue_key_turns k WHERE k.queue = $1
  AND k.key = COALESCE(tasks.concurrency_key, '')), 0)

-- fragment: gated_key_round
row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff
  ORDER BY deadline ASC NULLS LAST, run_at, seq)

-- fragment: gated_turn
row_number() OVER (PARTITION BY eff
  ORDER BY krn, last, deadline ASC NULLS LAST, run_at, seq)
