-- A succeeded attempt is no longer written to task_attempts, as on Postgres
-- (its migration 0018): the task row keeps it (state 'succeeded' with attempt,
-- leased_by, leased_address, leased_at, fencing_token, finished_at), and
-- task_attempts holds the attempts that ended otherwise. Readers take a
-- succeeded task's attempt from its row unless task_attempts has one for that
-- attempt (tasks that succeeded before this migration), so none is counted
-- twice. A requeue of a succeeded task, were there one, would first have to
-- write the row's attempt out.
--
-- The attempt history as readers outside the broker see it, both forms
-- together. The attempt rows a succeeded task has are found by an outer join,
-- one lookup by key each (as a NOT EXISTS, MariaDB may read the whole of
-- task_attempts to materialize it). The broker's own reads spell the union out
-- per statement, each part bounded by its own index (MySQL pushes no outer
-- condition into a view of a UNION before 8.0.29).
CREATE OR REPLACE VIEW task_attempts_all AS
SELECT task_id, attempt, worker_id, worker_address, leased_at, finished_at, outcome,
    error, fencing_token
FROM task_attempts
UNION ALL
SELECT t.id, t.attempt, COALESCE(t.leased_by, ''), COALESCE(t.leased_address, ''),
    COALESCE(t.leased_at, t.updated_at), t.finished_at, 'succeeded', NULL, t.fencing_token
FROM tasks t LEFT JOIN task_attempts a ON a.task_id = t.id AND a.attempt = t.attempt
WHERE t.state = 'succeeded' AND a.task_id IS NULL;
