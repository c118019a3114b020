-- The console's reads with a million tasks (issue 18; docs/performance.md).
-- Dead letters: the dead tasks of every queue without a scan of the table. The
-- error text is not in the index: a B-tree entry is limited to about 2.7 kB and
-- an error may be 16 kB (a longer one would make the Fail that stores it fail).
-- It holds only dead tasks: the lease and settle path of other tasks never
-- touches it.
CREATE INDEX tasks_dead ON tasks (queue) WHERE state = 'dead';
-- Tasks created in a time range, newest first (ListTasks with created_after or
-- created_before).
CREATE INDEX tasks_created ON tasks (created_at, seq);
