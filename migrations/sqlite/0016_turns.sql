-- Round-robin fairness keeps its turns across leases (and replicas): each grant
-- of a round-robin queue takes the next number of the queue's counter
-- (queues.served), and a key keeps the number of its latest grant. A lease ranks
-- a round's keys by it, the key served longest ago first; a key without a row
-- (never served, or purged long after) ranks first. Tasks without a key are the
-- key ''.
ALTER TABLE queues ADD COLUMN served INTEGER NOT NULL DEFAULT 0;
CREATE TABLE queue_key_turns (
    queue  TEXT    NOT NULL,
    key    TEXT    NOT NULL,
    served INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
);
