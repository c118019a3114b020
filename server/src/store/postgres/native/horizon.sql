-- name: event_horizon
-- own: event ids carry the writing transaction's id; the other stores number events as they commit
-- Step 1 of horizon.rs: the event id below which every event is final.
SELECT LEAST(pg_snapshot_xmax(c.s)::text::bigint,
    (SELECT min(x::text::bigint) FROM pg_snapshot_xip(c.s) AS x
     WHERE x::xid IN (
       SELECT backend_xid FROM pg_stat_activity
       WHERE backend_xid IS NOT NULL AND datname = current_database()
       UNION ALL
       SELECT transaction FROM pg_prepared_xacts WHERE database = current_database())))
  << 20 FROM (SELECT pg_current_snapshot() AS s) c
