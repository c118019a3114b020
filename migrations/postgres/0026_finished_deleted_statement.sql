-- Retention deletes tasks a batch at a time; the delete trigger of 0024 ran once
-- per deleted task, each time reading the watermark FOR SHARE and appending a -1
-- row to the `finished_counts` log (a million rows for a million tasks, which the
-- fold then sums). It runs once per DELETE statement instead, over the statement's
-- deleted rows (a transition table): the watermark is read FOR SHARE once, and one
-- row per (queue, finished state) carries the statement's count. A statement that
-- deletes no finished task takes no lock on the watermark, as before.
DROP TRIGGER tasks_finished_deleted ON tasks;

CREATE FUNCTION taskbroker_finished_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM finished_gone
            WHERE state IN ('succeeded', 'dead', 'cancelled')) THEN
        RETURN NULL;
    END IF;
    SELECT watermark INTO w FROM finished_fold WHERE id = 1 FOR SHARE;
    INSERT INTO finished_counts (queue, state, n)
        SELECT queue, state, -COUNT(*) FROM finished_gone
        WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at <= w
        GROUP BY queue, state;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_finished_deleted AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS finished_gone
    FOR EACH STATEMENT EXECUTE FUNCTION taskbroker_finished_deleted();
