-- taskbroker outbox, for the PRODUCER's own MySQL or MariaDB database (not the broker's).
--
-- A producer inserts a task into taskbroker_outbox in the same transaction as its
-- business change; `taskbroker relay --source mysql://...` ships committed rows to the
-- broker and deletes them once the broker has acknowledged them. A rolled-back
-- transaction leaves no row, so no task. See docs/outbox.md.
--
-- Apply with `mysql "$DB" < 0001_outbox.sql` (or your migration tool: Flyway, Liquibase,
-- goose, Alembic), or let the relay do it: `taskbroker relay --source ... --init-schema`.
-- The file is idempotent: applying it again changes nothing. Needs MySQL 8.0.13 or later
-- (expression defaults; SKIP LOCKED from 8.0.1) or MariaDB 10.6 or later (SKIP LOCKED).
-- InnoDB is required: the relay's row locks and the producer's transaction need it.
--
-- Columns (the same as the Postgres table's, migrations/outbox/postgres/):
--   id              order of shipping (AUTO_INCREMENT: assigned at insert, not at commit).
--   idempotency_key the task's key at the broker when the spec carries none: `outbox:`
--                   and a random UUID (the client libraries write one; the default
--                   covers rows inserted by hand), so rows of different databases (or
--                   of a restored backup) never share one. A spec with its own key is
--                   submitted under that key.
--   spec            a taskbroker.v1.TaskSpec, serialized as protobuf.
--   created_at      when the row was written, in UTC (the relay reports lag from it).
--   attempts        refused Submits of this row (a broker that cannot be reached does
--                   not count).
--   last_error      why the broker refused the row, when it did.
--   failed_at       set (UTC) when the broker refused the row for good (an invalid
--                   spec); the relay skips such rows. Fix and reset to NULL, or delete.
--
-- MySQL has no LISTEN/NOTIFY, so there is no trigger: the relay polls
-- (--poll-interval, 2 s by default; lower it for less lag).

CREATE TABLE IF NOT EXISTS taskbroker_outbox (
    id              bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    idempotency_key varchar(512) NOT NULL DEFAULT (concat('outbox:', uuid())),
    spec            longblob NOT NULL,
    created_at      datetime(6) NOT NULL DEFAULT (utc_timestamp(6)),
    attempts        int NOT NULL DEFAULT 0,
    last_error      text NULL,
    failed_at       datetime(6) NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
