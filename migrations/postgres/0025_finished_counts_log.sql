-- The finished counts become a log of signed counts: a change that takes tasks
-- out of a finished state, or deletes them, appends rows (queue, state, n) and
-- never updates one, so two such changes in flight at once (a retention pass
-- and a bulk requeue, say) take no lock on a shared row and cannot deadlock on
-- the counts of two queues taken in opposite orders. A count is the sum of its
-- rows (the readers already sum); the fold, holding the watermark, sums the log
-- into one row per (queue, state) and appends what it passes.
ALTER TABLE finished_counts DROP CONSTRAINT finished_counts_pkey;

CREATE OR REPLACE FUNCTION taskbroker_finished_left() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w BIGINT;
BEGIN
    SELECT watermark INTO w FROM finished_fold WHERE id = 1 FOR SHARE;
    IF OLD.finished_at <= w THEN
        INSERT INTO finished_counts (queue, state, n) VALUES (OLD.queue, OLD.state, -1);
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.state IN ('succeeded', 'dead', 'cancelled') AND NEW.finished_at <= w THEN
            INSERT INTO finished_counts (queue, state, n) VALUES (NEW.queue, NEW.state, 1);
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- The update trigger fires on `created_at`, which no statement changes: the
-- statements that take a task out of a finished state (requeue, requeue by
-- error, bulk requeue, dead -> cancelled) name it (`created_at = created_at`),
-- and the lease, settle and submit statements do not, so Postgres evaluates no
-- trigger condition for their rows.
DROP TRIGGER tasks_finished_left ON tasks;

CREATE TRIGGER tasks_finished_left AFTER UPDATE OF created_at ON tasks
    FOR EACH ROW WHEN (OLD.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION taskbroker_finished_left();
