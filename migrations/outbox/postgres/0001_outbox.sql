-- taskbroker outbox, for the PRODUCER's own Postgres database (not the broker's).
--
-- A producer inserts a task into taskbroker_outbox in the same transaction as its
-- business change; `taskbroker relay` ships committed rows to the broker and deletes
-- them once the broker has acknowledged them. A rolled-back transaction leaves no row,
-- so no task. See docs/outbox.md.
--
-- Apply with `psql "$DATABASE_URL" -f 0001_outbox.sql` (or your migration tool), or
-- let the relay do it: `taskbroker relay --source ... --init-schema`. The file is
-- idempotent: applying it again changes nothing. Needs Postgres 13 or later
-- (gen_random_uuid is built in from 13).
--
-- Columns:
--   id              order of shipping (FIFO as far as commit order allows).
--   idempotency_key the task's key at the broker when the spec carries none; a random
--                   UUID, so rows of different databases (or of a restored backup)
--                   never share one. A spec with its own key is submitted under that key.
--   spec            a taskbroker.v1.TaskSpec, serialized as protobuf.
--   created_at      when the row was written (the relay reports lag from it).
--   attempts        refused Submits of this row (a broker that cannot be reached does
--                   not count).
--   last_error      why the broker refused the row, when it did.
--   failed_at       set when the broker refused the row for good (an invalid spec);
--                   the relay skips such rows. Fix and reset to NULL, or delete.

CREATE TABLE IF NOT EXISTS taskbroker_outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL DEFAULT ('outbox:' || gen_random_uuid()),
    spec            bytea NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    failed_at       timestamptz
);

-- One notification per INSERT statement (FOR EACH STATEMENT), delivered at commit, so
-- a transaction that inserts 10,000 rows wakes the relay once; Postgres also folds
-- identical notifications of one transaction into one. The relay polls as well, so a
-- notification missed while it was disconnected delays rows, never loses them.
CREATE OR REPLACE FUNCTION taskbroker_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('taskbroker_outbox', '');
    RETURN NULL;
END
$$;

-- Created only when missing: DROP TRIGGER would lock the table against inserts.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgname = 'taskbroker_outbox_notify'
          AND tgrelid = 'taskbroker_outbox'::regclass
    ) THEN
        CREATE TRIGGER taskbroker_outbox_notify
            AFTER INSERT ON taskbroker_outbox
            FOR EACH STATEMENT EXECUTE FUNCTION taskbroker_outbox_notify();
    END IF;
END
$$;
