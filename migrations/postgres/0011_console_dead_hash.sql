-- The console's dead letters with a million tasks (issue 18; docs/performance.md).
-- Dead tasks are grouped by queue and last error. The error text cannot be in an
-- index (a B-tree entry is limited to about 2.7 kB; an error may be 16 kB), so a
-- dead task stores a 64-bit hash of it, computed by the database whenever the row
-- is written in state 'dead' (NULL in every other state): every path to DEAD (Fail,
-- the reaper, deadlines, a batch) fills it without a change to its statement.
-- Adding the column rewrites the table once (about 3 s per million tasks here).
ALTER TABLE tasks ADD COLUMN error_hash BIGINT GENERATED ALWAYS AS
    (CASE WHEN state = 'dead' THEN hashtextextended(COALESCE(last_error, ''), 0) END) STORED;
-- Groups are counted from this index alone (an index-only scan in (queue,
-- error_hash) order); one row per group is then read for its text. It holds only
-- dead tasks, like tasks_dead, which it replaces (its first column is the queue).
CREATE INDEX tasks_dead_error ON tasks (queue, error_hash, finished_at) WHERE state = 'dead';
DROP INDEX tasks_dead;
