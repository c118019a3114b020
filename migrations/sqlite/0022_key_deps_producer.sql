-- Dependencies by key bind only within a producer: `producer` is the waiting
-- task's producer (its token's name), NULL when it was submitted without one
-- (no authentication, an admin token). A keyed insert binds the waits of its
-- own producer and the producer-less ones, never another producer's; the
-- index leads with (queue, key, producer), so the insert of a key reads only
-- the waits it binds, however many other producers wait for that key.
ALTER TABLE task_key_deps ADD COLUMN producer TEXT;
-- Waits recorded before: their task's producer, as the broker recorded it.
UPDATE task_key_deps
SET producer = (SELECT json_extract(t.metadata, '$."taskbroker.producer"')
                FROM tasks t WHERE t.id = task_key_deps.task_id)
WHERE bound_to IS NULL;

DROP INDEX task_key_deps_waiting;
CREATE INDEX task_key_deps_waiting ON task_key_deps (queue, key, producer)
    WHERE bound_to IS NULL;

DROP TRIGGER tasks_flow_bind_keys;
-- The inserted task's producer is the `taskbroker.producer` entry of its
-- metadata (set by the broker for a producer's Submit and for the tasks of a
-- producer's schedule). Producer-less waits first, then the producer's own:
-- each statement one probe of the index.
CREATE TRIGGER tasks_flow_bind_keys AFTER INSERT ON tasks
WHEN NEW.key IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO task_deps (depends_on, task_id, resolved)
    SELECT NEW.id, task_id, 0 FROM task_key_deps
    WHERE queue = NEW.queue AND key = NEW.key AND producer IS NULL AND bound_to IS NULL;
    INSERT OR IGNORE INTO task_deps (depends_on, task_id, resolved)
    SELECT NEW.id, task_id, 0 FROM task_key_deps
    WHERE queue = NEW.queue AND key = NEW.key
      AND producer = json_extract(NEW.metadata, '$."taskbroker.producer"')
      AND bound_to IS NULL;
    UPDATE task_key_deps SET bound_to = NEW.id
    WHERE queue = NEW.queue AND key = NEW.key AND producer IS NULL AND bound_to IS NULL;
    UPDATE task_key_deps SET bound_to = NEW.id
    WHERE queue = NEW.queue AND key = NEW.key
      AND producer = json_extract(NEW.metadata, '$."taskbroker.producer"')
      AND bound_to IS NULL;
END;
