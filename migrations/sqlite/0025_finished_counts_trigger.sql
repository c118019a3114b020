-- The finished-count trigger fires on `created_at`, which no statement changes:
-- the statements that take a task out of a finished state (requeue, requeue by
-- error, bulk requeue, dead -> cancelled) name it (`created_at = created_at`),
-- and the lease, settle and submit statements do not, so SQLite codes no
-- trigger into them. A trigger on `state` was coded into every lease and settle
-- and cost them about half again the broker's CPU per task, though its WHEN
-- held for none of their rows.
DROP TRIGGER tasks_finished_left;

CREATE TRIGGER tasks_finished_left AFTER UPDATE OF created_at ON tasks
WHEN OLD.state IN ('succeeded', 'dead', 'cancelled')
BEGIN
    INSERT INTO finished_counts (queue, state, n)
    SELECT OLD.queue, OLD.state, -1 FROM finished_fold
    WHERE id = 1 AND OLD.finished_at <= watermark
    ON CONFLICT (queue, state) DO UPDATE SET n = n - 1;
    INSERT INTO finished_counts (queue, state, n)
    SELECT NEW.queue, NEW.state, 1 FROM finished_fold
    WHERE id = 1 AND NEW.state IN ('succeeded', 'dead', 'cancelled')
      AND NEW.finished_at <= watermark
    ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;
