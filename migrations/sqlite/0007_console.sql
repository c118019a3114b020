-- The console's reads with a million tasks (issue 18; docs/performance.md).
-- Dead letters grouped by queue and last error are counted from this index alone
-- (it holds only dead tasks: the lease and settle path of other tasks never
-- touches it; `state` is in it so that every SQLite version sees it as covering).
CREATE INDEX tasks_dead ON tasks (queue, last_error, finished_at, state) WHERE state = 'dead';
-- Tasks created in a time range, newest first (ListTasks with created_after or
-- created_before); the seq (rowid) ends every SQLite index.
CREATE INDEX tasks_created ON tasks (created_at);
