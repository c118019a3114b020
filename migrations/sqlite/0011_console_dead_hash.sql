-- The console's dead letters with a million tasks (issue 18; docs/performance.md).
-- Nothing to change on SQLite: its tasks_dead index (0007) holds the error text
-- itself (SQLite has no entry size limit), so the groups are counted from that
-- index alone already. Postgres stores a hash of the error instead (its 0011).
-- This file keeps the two stores' migrations numbered alike.
SELECT 1;
