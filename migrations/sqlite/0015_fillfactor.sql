-- Empty on purpose: Postgres's 0015 lowers the tasks table's fill factor so a
-- lease's or settle's new row version stays on its page. SQLite has no fill
-- factor (a row is rewritten in place in its B-tree page), so there is nothing
-- to do here; the file keeps the migration numbers the same on every store.
SELECT 1;
