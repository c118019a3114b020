-- Planner statistics of an empty tasks table. An ANALYZE of the empty table (0017
-- runs one, on a fresh database) records it as empty for good, while a table never
-- analyzed is assumed to hold at least ten pages. The hot statements keep one
-- generic plan per connection, made at their first run (store/postgres/connect.rs):
-- made on "empty" statistics, the lease's plan reads every row of tasks for each
-- lease (a nested loop around the picked rows) until the next ANALYZE, about 2 s
-- per lease of 1,000 tasks with 20,000 rows in the table. An empty table goes back
-- to "never analyzed" here (TRUNCATE resets its statistics); the table is locked
-- first, so no task can be written between the check and the TRUNCATE. A table
-- with rows keeps its statistics, which the broker refreshes when they fall far
-- behind the table (store/postgres/statistics.rs).
LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tasks) THEN
        TRUNCATE tasks;
    END IF;
END $$;
