-- Finished tasks counted without reading each one (GetQueueStats, the console's
-- overview). `finished_counts` holds, per queue and finished state, the tasks
-- whose finish time is at or before the watermark of `finished_fold`; the count
-- of a (queue, state) is its row here plus its tasks finished after the
-- watermark, a range of tasks_finished (finished_at). The fold
-- (`Observe::finished_fold`, run by the maintenance loop) moves the watermark
-- forward, up to a margin before now, and adds the tasks it passes.
CREATE TABLE finished_counts (
    queue TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, state)
);

CREATE TABLE finished_fold (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    watermark INTEGER NOT NULL
);

INSERT INTO finished_fold (id, watermark) VALUES (1, 0);

-- A task that leaves a finished state (requeue, dead -> cancelled) or is deleted
-- (retention) after the fold passed it is taken out of its count, and put in its
-- new finished state's, in the change's transaction (one writer: the fold and a
-- change never interleave). The WHEN names the old state: a lease, a settle or a
-- submit (no row in a finished state) never runs the body.
CREATE TRIGGER tasks_finished_left AFTER UPDATE OF state, finished_at ON tasks
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

CREATE TRIGGER tasks_finished_deleted AFTER DELETE ON tasks
WHEN OLD.state IN ('succeeded', 'dead', 'cancelled')
BEGIN
    INSERT INTO finished_counts (queue, state, n)
    SELECT OLD.queue, OLD.state, -1 FROM finished_fold
    WHERE id = 1 AND OLD.finished_at <= watermark
    ON CONFLICT (queue, state) DO UPDATE SET n = n - 1;
END;
