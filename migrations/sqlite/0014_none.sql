-- Empty on purpose. Every store's migrations carry the same numbers, so one
-- number means one schema step everywhere; SQLite needed no change at 0014.
SELECT 1;
