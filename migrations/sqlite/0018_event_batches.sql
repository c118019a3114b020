-- Postgres keeps a statement's events as one row and a succeeded attempt on its
-- task row from this number on (docs/performance.md, "Writes per task"); SQLite
-- keeps one row per event and per attempt (its single writer's cost is per
-- statement, not per WAL record). The attempt history under the name both stores
-- give it, for readers outside the broker.
CREATE VIEW task_attempts_all AS
SELECT task_id, attempt, worker_id, worker_address, leased_at, finished_at, outcome,
    error, fencing_token
FROM task_attempts;
