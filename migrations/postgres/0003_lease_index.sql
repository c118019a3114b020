-- The Postgres lease index already orders "no deadline last" (NULLS LAST); this
-- migration keeps the numbering in step with SQLite's and refreshes statistics so
-- the planner keeps the ordered index scan.
ANALYZE tasks;
