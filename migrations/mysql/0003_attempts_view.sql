-- The attempt history under the name every store gives it, for readers outside the
-- broker: the MySQL store writes each attempt, the succeeded one included, to
-- task_attempts.
CREATE VIEW task_attempts_all AS
SELECT task_id, attempt, worker_id, worker_address, leased_at, finished_at, outcome,
    error, fencing_token
FROM task_attempts;
