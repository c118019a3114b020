-- Postgres's 0015 sets the tasks table's fill factor; SQLite has none. This file
-- keeps the two stores' migration numbers in step.
SELECT 1;
