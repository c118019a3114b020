-- A pending task whose run_at was in the future when it was last written is
-- `waiting`. The lease index holds only the pending tasks that are not waiting, so
-- a lease, the sync-match priority check and the next-run query never walk the
-- tasks scheduled for later, however many there are and whatever their priority.
-- tasks_waiting holds the waiting ones by (queue, run_at): every lease first
-- promotes the due part of it (clears the flag; usually nothing to read), and the
-- next-run query reads its first entry. Every write of run_at writes the flag.
-- Queries that read either index name its predicate as written here (SQLite
-- matches it term by term).
ALTER TABLE tasks ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET waiting = 1 WHERE state = 'pending'
    AND run_at > CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);
DROP INDEX tasks_lease;
CREATE INDEX tasks_lease ON tasks (queue, priority DESC, deadline IS NULL, deadline, run_at, seq)
    WHERE state = 'pending' AND waiting = 0;
CREATE INDEX tasks_waiting ON tasks (queue, run_at) WHERE state = 'pending' AND waiting = 1;
