-- Text compares byte for byte, trailing spaces included. utf8mb4_bin is a PAD SPACE
-- collation on MariaDB and MySQL alike ('k' = 'k ' there, so two keys, ids or lease
-- tokens that differ only in trailing spaces were one); every text column now takes
-- the NO PAD binary collation of the server: utf8mb4_nopad_bin on MariaDB,
-- utf8mb4_0900_bin on MySQL (8.0.17 and later). Both order by code point, as
-- utf8mb4_bin did, and as Rust compares strings.
--
-- CONVERT TO also sets each table's default collation, so a column added later
-- takes it. Every text column of the schema must share one collation (a join or a
-- comparison of two columns of different collations is an error): a table added
-- later names the same collation, picked the same way. A table is rebuilt
-- (copied) by its conversion; no row can collide in a unique index, since NO PAD
-- equality is byte equality, finer than PAD SPACE equality.
SET @taskbroker_nopad_bin = IF(VERSION() LIKE '%MariaDB%', 'utf8mb4_nopad_bin',
    'utf8mb4_0900_bin');

SET @taskbroker_sql = CONCAT('ALTER TABLE tasks CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE task_attempts CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE schedules CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE schedule_runs CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE workers CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE queues CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE queue_key_tokens CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE queue_key_turns CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE queue_dead_letters CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE task_deps CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE task_events CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE event_seq CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE lease_workers CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE task_key_deps CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;

SET @taskbroker_sql = CONCAT('ALTER TABLE key_deps_lock CONVERT TO CHARACTER SET utf8mb4 COLLATE ',
    @taskbroker_nopad_bin);
PREPARE taskbroker_stmt FROM @taskbroker_sql;
EXECUTE taskbroker_stmt;
DEALLOCATE PREPARE taskbroker_stmt;
