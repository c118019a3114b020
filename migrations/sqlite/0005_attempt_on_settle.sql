-- An attempt's row is written once, when the attempt ends (complete, fail, lease
-- expiry, deadline), instead of at lease time and again at settle time: one row
-- write less per task. The running attempt lives on the task row meanwhile
-- (leased_by, fencing_token, and these two columns); attempt lists add it.
ALTER TABLE tasks ADD COLUMN leased_at BIGINT;
ALTER TABLE tasks ADD COLUMN leased_address TEXT;
UPDATE tasks SET
    leased_at = (SELECT a.leased_at FROM task_attempts a
                 WHERE a.task_id = tasks.id AND a.attempt = tasks.attempt),
    leased_address = (SELECT a.worker_address FROM task_attempts a
                      WHERE a.task_id = tasks.id AND a.attempt = tasks.attempt)
WHERE state = 'leased';
DELETE FROM task_attempts WHERE outcome = 'running';
