//! How a write runs on MySQL, and how it records its events.
//!
//! A write is one [`Job`]: a READ COMMITTED transaction begun here, made of
//! the operations of one store call ([`job!`] runs a call's body as a job, and
//! runs it again when it lost a deadlock or a lock wait). Every write method
//! of the store runs as a job; there is no other way to write.
//!
//! Several jobs of one kind may run at once in one broker (the service's
//! `mysql_jobs_in_flight`), as jobs of several replicas do: row locks keep them
//! apart, and a job that loses a deadlock or a lock wait is run again alone.
//!
//! The events of its transitions are buffered as it goes ([`Job::push`]) and
//! written at its end by [`MysqlStore::finish`] (`events.rs`: dependents of
//! finished tasks resolved, dead-letter notices filed, ids taken from
//! `event_seq`), so they commit or roll back with the write. After the commit
//! it wakes this replica's long-polls.

use std::sync::atomic::Ordering;

use sqlx::{MySql, Transaction};

use super::super::flow::Ev;
use super::*;

/// One write transaction and what its operations leave for its end.
pub(crate) struct Job {
    pub tx: Transaction<'static, MySql>,
    pub events: Vec<Pending>,
    /// Queues that got pending tasks from flow (unblocked, dead letters, bulk requeue).
    pub woken: Vec<String>,
    /// Rows were locked and not taken: other replicas' long-polls must look again.
    pub spare: bool,
    /// A Submit's plain insert, whose broker wakes this replica's waiters
    /// itself: this replica's poller skips its events.
    pub own_wakes: bool,
    /// Bytes of parameters one statement may carry (`native/packet.rs`).
    pub packet: usize,
}

pub(crate) use super::super::flow::Pending;

impl Job {
    pub fn conn(&mut self) -> &mut sqlx::MySqlConnection {
        &mut self.tx
    }

    /// Buffers an event of this job.
    pub fn push(&mut self, e: Ev<'_>) {
        self.events.push(Pending::from(e));
    }
}

/// Runs `$body` (an expression using `$job: &mut Job`) as a job: begun,
/// finished and committed, run again after a deadlock (a few times).
macro_rules! job {
    ($self:ident, |$job:ident| $body:expr) => {{
        let mut tries = 0u32;
        loop {
            let mut job_value = $self.begin().await?;
            let result = {
                let $job = &mut job_value;
                async { $body }.await
            };
            let result = match result {
                Ok(v) => $self.finish(job_value).await.map(|()| v),
                Err(e) => {
                    drop(job_value);
                    Err(e)
                }
            };
            match result {
                Err(e) if tries < 8 && $crate::store::mysql::tx::retryable(&e) => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(tries))).await;
                }
                other => break other,
            }
        }
    }};
}

pub(crate) use super::retryable;

impl MysqlStore {
    pub(crate) async fn begin(&self) -> StoreResult<Job> {
        let tx = if self.down.load(Ordering::Relaxed) {
            match tokio::time::timeout(ACQUIRE_WHILE_DOWN, self.pool.begin()).await {
                Ok(tx) => tx,
                Err(_) => Err(sqlx::Error::PoolTimedOut),
            }
        } else {
            self.pool.begin().await
        };
        let tx = tx.map_err(StoreError::from).inspect_err(|e| {
            if matches!(e, StoreError::Unavailable(_)) {
                self.down.store(true, Ordering::Relaxed);
            }
        })?;
        self.down.store(false, Ordering::Relaxed);
        Ok(Job {
            tx,
            events: Vec::new(),
            woken: Vec::new(),
            spare: false,
            own_wakes: false,
            packet: self.packet,
        })
    }
}

pub(crate) use super::super::flow::simple;
