-- Admission: the stored queue settings, their usage, the place of a task in
-- the gated order, the per-key buckets, dead-letter queues.

-- name: queue_pending
SELECT COUNT(*)::BIGINT, COALESCE(SUM(octet_length(payload)), 0)::BIGINT FROM tasks
WHERE queue = $1 AND state IN ('pending', 'blocked')

-- name: queue_dead_letters_set_clear
DELETE FROM queue_dead_letters

-- name: queue_dead_letters_set_insert
INSERT INTO queue_dead_letters (queue, dead_letter_queue)
SELECT * FROM UNNEST($1::text[], $2::text[])

-- name: queue_list
SELECT name, config, updated_at, version FROM queues ORDER BY name

-- name: queue_seed_delete
-- Seeded queues (never put) no longer in the seed.
DELETE FROM queues WHERE updated_at IS NULL AND name <> ALL($1::text[])

-- name: queue_seed_upsert
-- own: Postgres's ON CONFLICT DO UPDATE takes a WHERE, so the seed is written in one statement over arrays (MySQL's ON DUPLICATE KEY UPDATE has none)
INSERT INTO queues (name, config) SELECT * FROM UNNEST($1::text[], $2::text[])
ON CONFLICT (name) DO UPDATE SET config = EXCLUDED.config,
  version = queues.version + 1
WHERE queues.updated_at IS NULL AND queues.config <> EXCLUDED.config

-- name: queue_put_insert
INSERT INTO queues (name, config, updated_at, version) VALUES ($1, $2, $3, 1)
ON CONFLICT (name) DO NOTHING

-- name: queue_put_update
-- Conditional on the version read ($4).
UPDATE queues SET config = $2, updated_at = $3, version = version + 1
WHERE name = $1 AND version = $4

-- name: queue_usage_queue
SELECT config, tokens, refilled_at FROM queues WHERE name = $1

-- name: queue_usage_leased
SELECT count(*) FROM tasks WHERE queue = $1 AND state = 'leased'

-- name: queue_usage_key_holders
SELECT id FROM tasks WHERE queue = $1 AND state = 'leased'
  AND concurrency_key = $2 ORDER BY seq LIMIT 100

-- name: queue_usage_key_tokens
SELECT tokens, refilled_at FROM queue_key_tokens
WHERE queue = $1 AND key = $2

-- name: task_ahead_config
SELECT config FROM queues WHERE name = $1

-- name: task_ahead
-- The READY tasks ranked as the gated lease ranks them (gated.sql), counted
-- up to the place of the task $4 (aging $3 ms a step, round robin $5).
WITH r AS (SELECT seq, eff, last, COALESCE(deadline, 9223372036854775807) AS dl,
  run_at, CASE WHEN $5 THEN row_number() OVER (PARTITION BY
    COALESCE(concurrency_key, ''), eff ORDER BY deadline ASC NULLS LAST, run_at, seq)
  ELSE 1 END AS krn
  FROM (SELECT seq, concurrency_key, deadline, run_at,
    CASE WHEN $3 > 0 THEN priority + GREATEST($2 - run_at, 0) / $3
    ELSE priority END AS eff,
    CASE WHEN $5 THEN COALESCE((SELECT k.served FROM queue_key_turns k
      WHERE k.queue = $1 AND k.key = COALESCE(tasks.concurrency_key, '')), 0)
    ELSE 0 END AS last
    FROM (SELECT * FROM tasks WHERE state = 'pending' AND NOT waiting AND queue = $1
      UNION ALL SELECT * FROM tasks WHERE state = 'pending' AND waiting AND queue = $1
      AND run_at <= $2) tasks
    WHERE run_at <= $2 AND COALESCE(deadline, 9223372036854775807) > $2) a)
SELECT count(*) FROM r, r m WHERE m.seq = $4 AND r.seq <> m.seq
  AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq)
    < (m.krn, m.last, m.dl, m.run_at, m.seq)))

-- name: queue_key_tokens_purge_full
-- The buckets of the queue $1 full again at $2 (rate $3 a second, capacity $4).
DELETE FROM queue_key_tokens WHERE queue = $1
  AND tokens + GREATEST($2 - refilled_at, 0)::float8 * $3 / 1000.0 >= $4

-- name: queue_key_tokens_purge_unlimited
-- The buckets of queues without a per-key rate limit.
DELETE FROM queue_key_tokens WHERE queue <> ALL($1::text[])

-- name: queue_key_tokens_purge_turns
-- Round robin's turns: those of queues without it, and those served so long
-- ago ($2 turns) that an absent row ranks them the same.
DELETE FROM queue_key_turns t WHERE t.queue <> ALL($1::text[])
  OR t.served < (SELECT q.served FROM queues q WHERE q.name = t.queue) - $2
