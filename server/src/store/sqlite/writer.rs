//! Group commit. Every write runs on the one writer connection, in batches: the
//! writer takes all jobs waiting (up to `MAX_BATCH`), runs each inside a
//! savepoint of one transaction, commits once, and only then answers each
//! caller. With `synchronous = FULL` the fsync per commit is the cost that
//! matters, so concurrent callers share it; when idle, a lone job commits at once.

use futures::future::BoxFuture;
use sqlx::{Executor, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use super::super::{StoreError, StoreResult};

/// Jobs per transaction at most.
const MAX_BATCH: usize = 512;
/// Jobs waiting at most; callers beyond it wait for room (backpressure).
const QUEUE: usize = 4096;

/// A job's answer, held until its batch commits.
trait Reply: Send {
    fn send(self: Box<Self>, committed: Result<(), &sqlx::Error>);
}

trait Job: Send {
    /// Runs the job; `true` when it succeeded (else its savepoint is rolled back).
    fn run<'c>(
        self: Box<Self>,
        c: &'c mut SqliteConnection,
    ) -> BoxFuture<'c, (bool, Box<dyn Reply>)>;
    /// Answers without running (the batch could not start).
    fn abort(self: Box<Self>, e: &sqlx::Error);
}

struct Typed<T, F> {
    f: F,
    tx: oneshot::Sender<StoreResult<T>>,
}

struct TypedReply<T> {
    result: StoreResult<T>,
    tx: oneshot::Sender<StoreResult<T>>,
}

fn commit_error(e: &sqlx::Error) -> StoreError {
    StoreError::Unavailable(sqlx::Error::Protocol(format!("commit failed: {e}")))
}

impl<T: Send + 'static> Reply for TypedReply<T> {
    fn send(self: Box<Self>, committed: Result<(), &sqlx::Error>) {
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
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>> + Send + 'static,
{
    fn run<'c>(
        self: Box<Self>,
        c: &'c mut SqliteConnection,
    ) -> BoxFuture<'c, (bool, Box<dyn Reply>)> {
        Box::pin(async move {
            let result = (self.f)(c).await;
            let ok = result.is_ok();
            let reply: Box<dyn Reply> = Box::new(TypedReply {
                result,
                tx: self.tx,
            });
            (ok, reply)
        })
    }

    fn abort(self: Box<Self>, e: &sqlx::Error) {
        let _ = self.tx.send(Err(commit_error(e)));
    }
}

/// The handle callers use; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    /// Starts the writer task on `pool` (a pool of one connection).
    pub fn start(pool: SqlitePool) -> Self {
        let (jobs, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(pool, rx));
        Writer { jobs }
    }

    /// Runs `f` in the next batch and returns its result once the batch committed.
    pub async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, StoreResult<T>>
            + Send
            + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let closed = || StoreError::Unavailable(sqlx::Error::PoolClosed);
        self.jobs
            .send(Box::new(Typed { f, tx }))
            .await
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }
}

async fn run(pool: SqlitePool, mut rx: mpsc::Receiver<Box<dyn Job>>) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let mut conn = match pool.acquire().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "writer cannot get its connection");
                batch.drain(..).for_each(|j| j.abort(&e));
                continue;
            }
        };
        if let Err(e) = conn.execute("BEGIN IMMEDIATE").await {
            tracing::warn!(error = %e, "writer cannot begin a transaction");
            batch.drain(..).for_each(|j| j.abort(&e));
            continue;
        }
        tracing::trace!(jobs = batch.len(), "write batch");
        let mut replies = Vec::with_capacity(batch.len());
        let mut broken = None;
        for job in batch.drain(..) {
            if let Some(e) = &broken {
                job.abort(e);
                continue;
            }
            if let Err(e) = conn.execute("SAVEPOINT job").await {
                job.abort(&e);
                broken = Some(e);
                continue;
            }
            let (ok, reply) = job.run(&mut conn).await;
            let end = if ok {
                conn.execute("RELEASE job").await
            } else {
                match conn.execute("ROLLBACK TO job").await {
                    Ok(_) => conn.execute("RELEASE job").await,
                    Err(e) => Err(e),
                }
            };
            replies.push(reply);
            if let Err(e) = end {
                broken = Some(e);
            }
        }
        let committed = match broken {
            Some(e) => Err(e),
            None => conn.execute("COMMIT").await.map(|_| ()),
        };
        if let Err(e) = &committed {
            tracing::warn!(error = %e, jobs = replies.len(), "write batch failed; rolled back");
            let _ = conn.execute("ROLLBACK").await;
        }
        for r in replies {
            r.send(committed.as_ref().map(|_| ()));
        }
    }
}
