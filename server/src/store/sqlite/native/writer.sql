-- name: writer_begin
-- own: the writer thread's group commit; the other databases begin per transaction
-- A batch's transaction, taking the write lock at once.
BEGIN IMMEDIATE;

-- name: writer_savepoint
-- own: the writer thread's group commit runs each job of a batch in a savepoint
SAVEPOINT job;

-- name: writer_release
-- own: the writer thread's group commit runs each job of a batch in a savepoint
RELEASE job;

-- name: writer_rollback_job
-- own: the writer thread's group commit runs each job of a batch in a savepoint
ROLLBACK TO job;

-- name: writer_commit
-- own: the writer thread's group commit
COMMIT;

-- name: writer_rollback
-- own: the writer thread's group commit
ROLLBACK;

-- name: writer_checkpoint
-- own: WAL checkpoints off the writer thread
-- Copies committed WAL frames into the database file without blocking the
-- writer or readers.
PRAGMA wal_checkpoint(PASSIVE);
