-- Empty on purpose. Every store's migrations carry the same numbers, so one
-- number means one schema step everywhere; Postgres needed no change at 0014
-- (the next, 0015, sets the tasks table's fill factor). A database migrated
-- before this file existed runs it once, and it changes nothing.
SELECT 1;
