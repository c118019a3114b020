-- Finished tasks counted without reading each one (GetQueueStats, the console's
-- overview). `finished_counts` holds, per queue and finished state, the tasks
-- whose finish time is at or before the watermark of `finished_fold`; the count
-- of a (queue, state) is its row here plus its tasks finished after the
-- watermark, a range of tasks_queue_state (queue, state, finished_at). The fold
-- (`Observe::finished_fold`, run by the maintenance loop) moves the watermark
-- forward, up to a margin before now, and adds the tasks it passes.
CREATE TABLE finished_counts (
    queue TEXT NOT NULL,
    state TEXT NOT NULL,
    n BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, state)
);

CREATE TABLE finished_fold (
    id INT PRIMARY KEY CHECK (id = 1),
    watermark BIGINT NOT NULL
);

INSERT INTO finished_fold (id, watermark) VALUES (1, 0);

-- A task that leaves a finished state (requeue, dead -> cancelled) or is deleted
-- (retention) after the fold passed it is taken out of its count, and put in its
-- new finished state's, in the change's transaction. The watermark row is read
-- FOR SHARE (the fold locks it FOR UPDATE), so a fold and a change never miss
-- each other. The WHEN names the old state: a lease, a settle or a submit (no
-- row in a finished state) never calls the function.
CREATE FUNCTION taskbroker_finished_left() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w BIGINT;
BEGIN
    SELECT watermark INTO w FROM finished_fold WHERE id = 1 FOR SHARE;
    IF OLD.finished_at <= w THEN
        INSERT INTO finished_counts AS f (queue, state, n) VALUES (OLD.queue, OLD.state, -1)
        ON CONFLICT (queue, state) DO UPDATE SET n = f.n - 1;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.state IN ('succeeded', 'dead', 'cancelled') AND NEW.finished_at <= w THEN
            INSERT INTO finished_counts AS f (queue, state, n) VALUES (NEW.queue, NEW.state, 1)
            ON CONFLICT (queue, state) DO UPDATE SET n = f.n + 1;
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_finished_left AFTER UPDATE OF state, finished_at ON tasks
    FOR EACH ROW WHEN (OLD.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION taskbroker_finished_left();

CREATE TRIGGER tasks_finished_deleted AFTER DELETE ON tasks
    FOR EACH ROW WHEN (OLD.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION taskbroker_finished_left();
