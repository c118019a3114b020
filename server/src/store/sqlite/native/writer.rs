//! Group commit. Every write runs on the one writer connection, owned by a
//! thread of its own, in batches: the thread takes all jobs waiting (up to
//! `MAX_BATCH`), runs each inside a savepoint of one transaction, commits once,
//! and only then answers each caller. With `synchronous = FULL` the fsync per
//! commit is what costs, so concurrent callers share it; when idle, a lone job
//! commits at once.
//!
//! The connection is synchronous (rusqlite) on purpose: a batch runs its
//! statements back to back with cached prepared statements, without a thread
//! hand-off per statement, so a job costs microseconds and batches stay short.

use std::panic::AssertUnwindSafe;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::super::super::{StoreError, StoreResult};
use super::super::sql;

/// Jobs per transaction at most.
const MAX_BATCH: usize = 1024;
/// Jobs waiting at most; callers beyond it wait for room (backpressure).
const QUEUE: usize = 8192;

/// A job's answer, held until its batch commits.
trait Reply: Send {
    fn send(self: Box<Self>, committed: Result<(), &rusqlite::Error>);
}

trait Job: Send {
    /// Runs the job; `true` when it succeeded (else its savepoint is rolled back).
    fn run(self: Box<Self>, c: &Connection) -> (bool, Box<dyn Reply>);
    /// Answers without running (the batch could not start).
    fn abort(self: Box<Self>, e: &rusqlite::Error);
}

struct Typed<T, F> {
    f: F,
    tx: oneshot::Sender<StoreResult<T>>,
}

struct TypedReply<T> {
    result: StoreResult<T>,
    tx: oneshot::Sender<StoreResult<T>>,
}

fn commit_error(e: &rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("commit failed: {e}").into())
}

impl<T: Send + 'static> Reply for TypedReply<T> {
    fn send(self: Box<Self>, committed: Result<(), &rusqlite::Error>) {
        let result = match committed {
            Ok(()) => self.result,
            Err(e) => Err(commit_error(e)),
        };
        // The caller may have gone away (its call was cancelled); nothing to do then.
        let _ = self.tx.send(result);
    }
}

impl<T, F> Job for Typed<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
{
    fn run(self: Box<Self>, c: &Connection) -> (bool, Box<dyn Reply>) {
        let result = (self.f)(c);
        let ok = result.is_ok();
        let reply: Box<dyn Reply> = Box::new(TypedReply {
            result,
            tx: self.tx,
        });
        (ok, reply)
    }

    fn abort(self: Box<Self>, e: &rusqlite::Error) {
        let _ = self.tx.send(Err(commit_error(e)));
    }
}

/// The handle callers use; cheap to clone. The writer thread ends when the last
/// handle is dropped.
#[derive(Clone)]
pub struct Writer {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    /// Starts the writer thread, which owns `conn`, and the checkpointer thread,
    /// which owns `checkpoint` (a second connection to the same database). The
    /// writer thread calls `after_commit` after each batch (committed or not).
    pub fn start(
        conn: Connection,
        checkpoint: Connection,
        after_commit: fn(),
    ) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel(QUEUE);
        let (committed, wake) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || checkpointer(checkpoint, wake))?;
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run(conn, rx, committed, after_commit))?;
        Ok(Writer { jobs })
    }

    /// Runs `f` in the next batch and returns its result once the batch committed.
    pub async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let closed = || StoreError::Unavailable("the SQLite writer has stopped".into());
        self.jobs
            .send(Box::new(Typed { f, tx }))
            .await
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }
}

fn exec(c: &Connection, sql: &str) -> rusqlite::Result<()> {
    c.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Copies committed WAL frames into the database file, off the writer thread, so
/// the writer's commits only append to the WAL. PASSIVE: it never blocks the
/// writer or readers. Runs after commits, at most once per `CHECKPOINT_EVERY`.
fn checkpointer(conn: Connection, wake: std::sync::mpsc::Receiver<()>) {
    const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(50);
    while wake.recv().is_ok() {
        let started = std::time::Instant::now();
        let done = conn.query_row(sql::WRITER_CHECKPOINT, [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match done {
            Ok((frames, copied)) => tracing::trace!(frames, copied, "wal checkpoint"),
            Err(e) => tracing::warn!(error = %e, "wal checkpoint failed"),
        }
        if let Some(rest) = CHECKPOINT_EVERY.checked_sub(started.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

fn run(
    conn: Connection,
    mut rx: mpsc::Receiver<Box<dyn Job>>,
    committed: std::sync::mpsc::SyncSender<()>,
    after_commit: fn(),
) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    let mut replies: Vec<Box<dyn Reply>> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if let Err(e) = exec(&conn, sql::WRITER_BEGIN) {
            tracing::warn!(error = %e, "writer cannot begin a transaction");
            batch.drain(..).for_each(|j| j.abort(&e));
            continue;
        }
        tracing::trace!(jobs = batch.len(), "write batch");
        if batch.len() == 1 {
            // A lone job needs no savepoint (its failure rolls back the
            // whole transaction, which holds nothing else), so the pages it
            // changes are not copied to a sub-journal first.
            if let Some(job) = batch.pop() {
                run_alone(&conn, job, &mut replies);
            }
            after_commit();
            let _ = committed.try_send(());
            continue;
        }
        let mut broken = None;
        for job in batch.drain(..) {
            if let Some(e) = &broken {
                job.abort(e);
                continue;
            }
            if let Err(e) = exec(&conn, sql::WRITER_SAVEPOINT) {
                job.abort(&e);
                broken = Some(e);
                continue;
            }
            // A panicking job loses its answer (its caller sees the writer as
            // unavailable) but neither the batch nor the thread.
            let ran = std::panic::catch_unwind(AssertUnwindSafe(|| job.run(&conn)));
            let (ok, reply) = match ran {
                Ok((ok, reply)) => (ok, Some(reply)),
                Err(_) => {
                    tracing::error!("a write job panicked; its changes are rolled back");
                    (false, None)
                }
            };
            let end = if ok {
                exec(&conn, sql::WRITER_RELEASE)
            } else {
                exec(&conn, sql::WRITER_ROLLBACK_JOB)
                    .and_then(|()| exec(&conn, sql::WRITER_RELEASE))
            };
            replies.extend(reply);
            if let Err(e) = end {
                broken = Some(e);
            }
        }
        let result = match broken {
            Some(e) => Err(e),
            None => exec(&conn, sql::WRITER_COMMIT),
        };
        if let Err(e) = &result {
            tracing::warn!(error = %e, jobs = replies.len(), "write batch failed; rolled back");
            let _ = exec(&conn, sql::WRITER_ROLLBACK);
        }
        for r in replies.drain(..) {
            r.send(result.as_ref().map(|_| ()));
        }
        // Flow: wake the queues whose tasks the batch unblocked.
        after_commit();
        // Full means a checkpoint is due already.
        let _ = committed.try_send(());
    }
}

/// Runs a batch of one job in the transaction begun for it: committed if it
/// succeeded, rolled back if it failed or panicked. Its caller then sees the
/// job's own result, or the commit's error.
fn run_alone(conn: &Connection, job: Box<dyn Job>, replies: &mut Vec<Box<dyn Reply>>) {
    let ran = std::panic::catch_unwind(AssertUnwindSafe(|| job.run(conn)));
    let (ok, reply) = match ran {
        Ok((ok, reply)) => (ok, Some(reply)),
        Err(_) => {
            tracing::error!("a write job panicked; its changes are rolled back");
            (false, None)
        }
    };
    replies.extend(reply);
    let result = if ok {
        let done = exec(conn, sql::WRITER_COMMIT);
        if let Err(e) = &done {
            tracing::warn!(error = %e, jobs = 1, "write batch failed; rolled back");
            let _ = exec(conn, sql::WRITER_ROLLBACK);
        }
        done
    } else {
        // The job failed: nothing of it may stay; its answer is its own error.
        match exec(conn, sql::WRITER_ROLLBACK) {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot roll back a failed write job");
                Err(e)
            }
        }
    };
    for r in replies.drain(..) {
        r.send(result.as_ref().map(|_| ()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(c: &Connection) -> StoreResult<i64> {
        Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?)
    }

    /// A batch of one job runs without a savepoint: its failure or
    /// panic must still leave nothing behind, answer its caller, and keep the
    /// writer usable.
    #[tokio::test]
    async fn a_lone_job_that_fails_or_panics_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.db");
        let conn = Connection::open(&path).expect("open");
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER)")
            .expect("schema");
        let writer =
            Writer::start(conn, Connection::open(&path).expect("open"), || {}).expect("start");

        let failed = writer
            .write(|c| {
                c.execute("INSERT INTO t VALUES (1)", [])?;
                Err::<(), _>(StoreError::Corrupt("the job failed".into()))
            })
            .await;
        assert!(matches!(failed, Err(StoreError::Corrupt(m)) if m == "the job failed"));
        assert_eq!(writer.write(count).await.expect("count"), 0);

        let panicked = writer
            .write(|c| -> StoreResult<()> {
                c.execute("INSERT INTO t VALUES (2)", [])?;
                panic!("the job panicked")
            })
            .await;
        assert!(matches!(panicked, Err(StoreError::Unavailable(_))));
        assert_eq!(writer.write(count).await.expect("count"), 0);

        writer
            .write(|c| Ok(c.execute("INSERT INTO t VALUES (3)", []).map(|_| ())?))
            .await
            .expect("insert");
        let reader = Connection::open(&path).expect("open");
        assert_eq!(count(&reader).expect("count"), 1);
    }
}
