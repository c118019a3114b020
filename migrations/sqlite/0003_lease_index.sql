-- Lease order with "no deadline last" inside the index, so a lease reads the first
-- rows of the index instead of sorting every pending task of the queue.
DROP INDEX tasks_lease;
CREATE INDEX tasks_lease ON tasks (queue, priority DESC, deadline IS NULL, deadline, run_at, seq)
    WHERE state = 'pending';
