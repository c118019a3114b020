-- name: session_role
-- own: following the primary of several Postgres hosts
-- A session's role: whether its host is a standby, whether it is read-only.
SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'
