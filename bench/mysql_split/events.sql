-- The event tables of gen.py: task_events and event_seq as the broker has them (CREATE IF NOT EXISTS), and the per-statement form.
CREATE TABLE IF NOT EXISTS task_events (
    event_id BIGINT NOT NULL PRIMARY KEY, task_id VARCHAR(64) NOT NULL, queue VARCHAR(255) NOT NULL,
    kind VARCHAR(32) NOT NULL, state VARCHAR(16) NOT NULL, attempt BIGINT NOT NULL, worker_id VARCHAR(256) NULL,
    `time` BIGINT NOT NULL, detail TEXT NULL, KEY task_events_task (task_id, event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE IF NOT EXISTS event_seq (id TINYINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB;
INSERT IGNORE INTO event_seq VALUES (1, 0);
CREATE TABLE event_batches (first_id BIGINT NOT NULL PRIMARY KEY, last_id BIGINT NOT NULL, queue VARCHAR(255) NOT NULL,
  body LONGTEXT NOT NULL, KEY eb_last (last_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE event_refs (task_id VARCHAR(64) NOT NULL, first_id BIGINT NOT NULL, PRIMARY KEY (task_id, first_id))
  ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
