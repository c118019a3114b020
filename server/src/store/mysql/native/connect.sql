-- name: connect_isolation
-- own: MySQL takes gap locks unless asked for READ COMMITTED per session
-- Every connection: row locks only on rows read, as on Postgres.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED

-- name: connect_lock_wait
-- own: MySQL's default lock wait is 50 s
-- Every connection: a statement never waits long for a lock another one holds.
SET SESSION innodb_lock_wait_timeout = 10

-- name: connect_max_allowed_packet
-- own: multi-row statements are cut to the server's packet (native/packet.rs)
SELECT CAST(@@max_allowed_packet AS SIGNED)
