-- name: queue_notify
-- own: NOTIFY wakes the long-polls of every replica; one process needs no message
-- Wakes the long-polls of the queues $2 (channel $1), at commit.
SELECT pg_notify($1, q) FROM UNNEST($2::text[]) AS q
