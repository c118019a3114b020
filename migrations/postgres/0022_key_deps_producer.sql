-- Dependencies by key bind only within a producer: `producer` is the waiting
-- task's producer (its token's name), NULL when it was submitted without one
-- (no authentication, an admin token). A keyed insert binds the waits of its
-- own producer and the producer-less ones, never another producer's; the
-- index leads with (queue, key, producer), so the insert of a key reads only
-- the waits it binds, however many other producers wait for that key.
ALTER TABLE task_key_deps ADD COLUMN producer TEXT;
-- Waits recorded before: their task's producer, as the broker recorded it.
UPDATE task_key_deps d SET producer = t.metadata::jsonb ->> 'taskbroker.producer'
FROM tasks t WHERE t.id = d.task_id AND d.bound_to IS NULL;

DROP INDEX task_key_deps_waiting;
CREATE INDEX task_key_deps_waiting ON task_key_deps (queue, key, producer)
    WHERE bound_to IS NULL;

-- As in migration 0020 (the same lock, the same edges), for the waits the
-- inserted task may satisfy: the producer-less ones and those of its producer,
-- the `taskbroker.producer` entry of its metadata (set by the broker for a
-- producer's Submit and for the tasks of a producer's schedule). Each of the
-- two is one probe of the index.
CREATE OR REPLACE FUNCTION taskbroker_bind_key_deps() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    inserted_by TEXT := NEW.metadata::jsonb ->> 'taskbroker.producer';
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('taskbroker.key_deps', 0));
    WITH anyone AS (
        UPDATE task_key_deps SET bound_to = NEW.id
        WHERE queue = NEW.queue AND key = NEW.key AND producer IS NULL AND bound_to IS NULL
        RETURNING task_id),
    own AS (
        UPDATE task_key_deps SET bound_to = NEW.id
        WHERE queue = NEW.queue AND key = NEW.key AND producer = inserted_by AND bound_to IS NULL
        RETURNING task_id)
    INSERT INTO task_deps (depends_on, task_id, resolved)
    SELECT NEW.id, task_id, FALSE FROM (SELECT task_id FROM anyone UNION ALL SELECT task_id FROM own) b
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        UPDATE tasks SET has_dependents = TRUE WHERE seq = NEW.seq;
    END IF;
    RETURN NULL;
END $$;
