-- name: queue_pending
SELECT COUNT(*), COALESCE(SUM(length(payload)), 0) FROM tasks
WHERE queue = ?1 AND state IN ('pending', 'blocked');

-- name: queue_dead_letters_set_clear
DELETE FROM queue_dead_letters;

-- name: queue_dead_letters_set_insert
INSERT INTO queue_dead_letters (queue, dead_letter_queue) VALUES (?1, ?2);

-- name: queue_list
SELECT name, config, updated_at, version FROM queues ORDER BY name;

-- name: queue_seed_delete
-- The seeded queues no longer configured (?1 the names configured, JSON).
DELETE FROM queues WHERE updated_at IS NULL
AND name NOT IN (SELECT value FROM json_each(?1));

-- name: queue_seed_upsert
-- own: SQLite's ON CONFLICT DO UPDATE takes a WHERE, so a seeded queue is written in one statement (MySQL's ON DUPLICATE KEY UPDATE has none)
INSERT INTO queues (name, config) VALUES (?1, ?2)
ON CONFLICT (name) DO UPDATE SET config = excluded.config, version = version + 1
WHERE queues.updated_at IS NULL AND queues.config <> excluded.config;

-- name: queue_put_insert
INSERT INTO queues (name, config, updated_at, version) VALUES (?1, ?2, ?3, 1)
ON CONFLICT (name) DO NOTHING;

-- name: queue_put_update
UPDATE queues SET config = ?2, updated_at = ?3, version = version + 1
WHERE name = ?1 AND version = ?4;

-- name: queue_key_tokens_purge_queues
-- own: SQLite runs the purge in the writer's batch, so it reads the queues' configs on the writer's connection, not through queue_list
SELECT name, config FROM queues;

-- name: queue_key_tokens_purge_full
-- A queue's per-key buckets full again at ?2 (?3 per second, ?4 the capacity).
DELETE FROM queue_key_tokens WHERE queue = ?1
AND tokens + MAX(?2 - refilled_at, 0) * ?3 / 1000.0 >= ?4;

-- name: queue_key_tokens_purge_unlimited
-- The buckets of queues without a per-key rate limit (?1 those with one, JSON).
DELETE FROM queue_key_tokens WHERE queue NOT IN (SELECT value FROM json_each(?1));

-- name: queue_key_tokens_purge_turns
-- Round robin's turns: those of queues without it (?1 those with it, JSON), and
-- those served so long ago (?2 turns kept) that an absent row ranks them the same.
DELETE FROM queue_key_turns WHERE queue NOT IN (SELECT value FROM json_each(?1))
OR served < (SELECT q.served FROM queues q WHERE q.name = queue_key_turns.queue) - ?2;

-- name: queue_usage_queue
SELECT config, tokens, refilled_at FROM queues WHERE name = ?1;

-- name: queue_usage_leased
SELECT count(*) FROM tasks WHERE queue = ?1 AND state = 'leased';

-- name: queue_usage_key_holders
SELECT id FROM tasks WHERE queue = ?1 AND state = 'leased'
AND concurrency_key = ?2 ORDER BY seq LIMIT 100;

-- name: queue_usage_key_tokens
SELECT tokens, refilled_at FROM queue_key_tokens WHERE queue = ?1 AND key = ?2;

-- name: task_ahead_config
SELECT config FROM queues WHERE name = ?1;

-- name: task_ahead
-- The READY tasks ranked as the gated lease ranks them (see `task_lease_gated_candidates`),
-- counted up to the task's own place: ?1 queue, ?2 now, ?3 aging ms (0: none),
-- ?4 the task's seq, ?5 round robin by key.
WITH r AS (SELECT seq, eff, last, COALESCE(deadline, 9223372036854775807) AS dl, run_at,
  CASE WHEN ?5 THEN row_number() OVER (PARTITION BY COALESCE(concurrency_key, ''), eff
    ORDER BY deadline IS NULL, deadline, run_at, seq) ELSE 1 END AS krn
  FROM (SELECT seq, concurrency_key, deadline, run_at,
    CASE WHEN ?3 > 0 THEN priority + MAX(?2 - run_at, 0) / ?3 ELSE priority END AS eff,
    CASE WHEN ?5 THEN COALESCE((SELECT k.served FROM queue_key_turns k
      WHERE k.queue = ?1 AND k.key = COALESCE(tasks.concurrency_key, '')), 0)
    ELSE 0 END AS last
    FROM (SELECT * FROM tasks WHERE state = 'pending' AND waiting = 0 AND queue = ?1
      UNION ALL SELECT * FROM tasks WHERE state = 'pending' AND waiting = 1
      AND queue = ?1 AND run_at <= ?2) tasks
    WHERE run_at <= ?2 AND (deadline IS NULL OR deadline > ?2)))
SELECT count(*) FROM r, r m WHERE m.seq = ?4 AND r.seq <> m.seq
  AND (r.eff > m.eff OR (r.eff = m.eff AND (r.krn, r.last, r.dl, r.run_at, r.seq)
    < (m.krn, m.last, m.dl, m.run_at, m.seq)));
