-- (The trigger the first text of migration 0004 created is dropped by the
-- broker before it migrates, where it exists: DROP TRIGGER, even IF EXISTS,
-- needs SUPER where binary logging is on, so it is not run where there is none.)

-- Waits bind only within a producer: `producer` is the waiting task's producer
-- (its token's name), NULL when it was submitted without one (no
-- authentication, an admin token). A keyed insert binds the waits of its own
-- producer and the producer-less ones, never another producer's, each through
-- this index on (queue, key, producer), so it reads only the waits it binds,
-- however many other producers wait for that key. (Prefixes keep the index
-- within InnoDB's 3072 bytes; the statements compare whole values.)
ALTER TABLE task_key_deps
    ADD COLUMN producer VARCHAR(255) NULL,
    DROP INDEX task_key_deps_key,
    ADD INDEX task_key_deps_waiting (queue(128), `key`(380), producer);

-- Waits recorded before: their task's producer, as the broker recorded it.
UPDATE task_key_deps d JOIN tasks t ON t.id = d.task_id
SET d.producer = JSON_UNQUOTE(JSON_EXTRACT(t.metadata, '$."taskbroker.producer"'))
WHERE d.bound_to IS NULL;
