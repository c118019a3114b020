-- Issue 17, "fewer writes per task" (docs/performance.md, "Writes per task (round 2,
-- session 4)"). The lease and the settle change `state`, which every partial index
-- names, so they are never HOT updates: each writes one entry into EVERY index whose
-- predicate holds for the new row version. Per task (submit, lease, complete) the
-- task table's indexes took 15 entries; now 12: a LEASED row version was in six
-- indexes and is in four, a finished one in five and is in four.
--
-- tasks_leased holds what tasks_held and the leased part of tasks_queue_state held,
-- queue first: per-queue leased counts (admission, stats, lists) read its prefix, a
-- worker's leases in one queue (max_leases_per_worker) both columns, and a worker's
-- leases in every queue (the registry, a worker's page) scan it whole, which holds
-- only the leases in flight.
CREATE INDEX tasks_leased ON tasks (queue, leased_by) WHERE state = 'leased';
DROP INDEX tasks_held;
-- (queue, state) keeps the finished and blocked tasks only, with the finish time:
-- retention finds old finished tasks through it (queue by queue, state by state),
-- so tasks_finished goes and a settle writes one entry where it wrote two.
CREATE INDEX tasks_queue_state_done ON tasks (queue, state, finished_at)
    WHERE state NOT IN ('pending', 'leased');
DROP INDEX tasks_queue_state;
DROP INDEX tasks_finished;
ALTER INDEX tasks_queue_state_done RENAME TO tasks_queue_state;
-- Tasks created in a time range (ListTasks with created_after or created_before):
-- LEASED rows are left out, so a lease writes no entry here; they are few, and the
-- list reads them apart (through tasks_leased) and merges them in.
CREATE INDEX tasks_created_unleased ON tasks (created_at, seq) WHERE state <> 'leased';
DROP INDEX tasks_created;
ALTER INDEX tasks_created_unleased RENAME TO tasks_created;
-- Room on each page for the new version of a row whose update changes no indexed
-- column (a checkpoint without an extension, a cancel request on a leased task), so
-- it is a HOT update: no index entry at all. Applies to pages written from now on.
ALTER TABLE tasks SET (fillfactor = 90);
