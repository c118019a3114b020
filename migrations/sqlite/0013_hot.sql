-- Issue 17, "fewer writes per task" (docs/performance.md, "Writes per task (round 2,
-- session 4)"). SQLite rewrites an index entry when a column it names (keys or
-- predicate) changes; the lease and the settle change `state`. A lease wrote an
-- entry into tasks_held and tasks_queue_state (and the settle moved the latter's
-- entry again); tasks_leased now holds what both held for leased rows, queue first,
-- and tasks_queue_state keeps finished and blocked rows only. Queries that read it
-- name its predicate as written here (SQLite matches it term by term).
CREATE INDEX tasks_leased ON tasks (queue, leased_by) WHERE state = 'leased';
DROP INDEX tasks_held;
DROP INDEX tasks_queue_state;
CREATE INDEX tasks_queue_state ON tasks (queue, state) WHERE state NOT IN ('pending', 'leased');
