-- A pending task whose run_at was in the future when it was last written is
-- `waiting`. The lease index holds only the pending tasks that are not waiting, so
-- a lease, the sync-match priority check and the next-run query never walk the
-- tasks scheduled for later, however many there are and whatever their priority.
-- tasks_waiting holds the waiting ones by (queue, run_at): a lease reads the due
-- part of it (run_at <= now, usually nothing) beside the lease index, and the
-- next-run query its first entry. A task that comes due stays waiting until a
-- lease promotes it (clears the flag); until then it is found through
-- tasks_waiting, in its place by priority. Every write of run_at writes the flag.
ALTER TABLE tasks ADD COLUMN waiting BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE tasks SET waiting = TRUE WHERE state = 'pending'
    AND run_at > (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
DROP INDEX tasks_lease;
CREATE INDEX tasks_lease ON tasks (queue, priority DESC, deadline ASC NULLS LAST, run_at, seq)
    WHERE state = 'pending' AND NOT waiting;
CREATE INDEX tasks_waiting ON tasks (queue, run_at) WHERE state = 'pending' AND waiting;
ANALYZE tasks;
