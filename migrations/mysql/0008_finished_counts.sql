-- Finished tasks counted without reading each one (GetQueueStats, the console's
-- overview). `finished_counts` holds, per queue and finished state, the tasks
-- whose finish time is at or before the watermark of `finished_fold`; the count
-- of a (queue, state) is its row here plus its tasks finished after the
-- watermark, a range of tasks_finished (state, finished_at). The fold
-- (`Observe::finished_fold`, run by the maintenance loop) moves the watermark
-- forward, up to a margin before now, and adds the tasks it passes. A write that
-- takes a task out of a finished state (requeue, dead -> cancelled) or deletes
-- it (retention) subtracts it here when it finished at or before the watermark,
-- in its own transaction, with the watermark row locked in share mode; the fold
-- locks it for update. The watermark starts at 0 with no counts: the first fold
-- counts the table once, in bounded steps, in the background.
CREATE TABLE finished_counts (
    queue VARCHAR(255) NOT NULL,
    state VARCHAR(16) NOT NULL,
    n BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, state)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE finished_fold (
    id INT NOT NULL PRIMARY KEY,
    watermark BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO finished_fold (id, watermark) VALUES (1, 0);

-- The NO PAD binary collation every text column shares (see migration 0005).
SET @taskbroker_nopad_bin = IF(VERSION() LIKE '%MariaDB%', 'utf8mb4_nopad_bin',
    'utf8mb4_0900_bin');

SET @taskbroker_sql = CONCAT('ALTER TABLE finished_counts CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE finished_fold CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;
