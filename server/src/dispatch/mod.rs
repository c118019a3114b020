//! Long-poll wake-ups. A Lease that finds nothing waits here, not on the database:
//! every change that makes a task pending calls [`Dispatcher::wake`] for its queue
//! (locally, and through the store's notifications from other replicas).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Most waiters one event wakes; the rest are reached by passing the wake-up on.
const MAX_WAKE: usize = 256;

#[derive(Default)]
pub struct Dispatcher {
    /// One Notify per queue that has (or had) a waiter. Queue names are bounded by
    /// validation, and a broker serves a bounded set of queues.
    queues: Mutex<HashMap<String, Arc<Notify>>>,
    /// Wakes every waiter (used when notifications may have been missed).
    all: Notify,
    /// Cancelled when the broker drains: waiting long-polls answer at once.
    draining: CancellationToken,
    /// Long-polls waiting right now.
    waiters: AtomicUsize,
}

/// Counts one waiting long-poll while it lives.
pub struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Dispatcher {
    pub fn new() -> Self {
        Self::default()
    }

    /// The Notify of each queue, created on first use.
    pub fn handles(&self, queues: &[String]) -> Vec<Arc<Notify>> {
        // The lock is held for a map lookup only, never across an await.
        let mut map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues
            .iter()
            .map(|q| map.entry(q.clone()).or_default().clone())
            .collect()
    }

    /// Wakes one waiter of `queue` (one per new task: no thundering herd; a waiter
    /// that leases a full batch passes the wake-up on), or every waiter for `None`
    /// (when notifications may have been missed).
    pub fn wake(&self, queue: Option<&str>) {
        self.wake_n(queue, 1);
    }

    /// Wakes up to `n` waiters of `queue`, or every waiter for `None`.
    pub fn wake_n(&self, queue: Option<&str>, n: usize) {
        match queue {
            Some(q) => {
                let map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(notify) = map.get(q) {
                    // Each call wakes one waiting long-poll (or leaves one permit).
                    for _ in 0..n.min(MAX_WAKE) {
                        notify.notify_one();
                    }
                }
            }
            None => self.all.notify_waiters(),
        }
    }

    pub fn all(&self) -> &Notify {
        &self.all
    }

    pub fn draining(&self) -> &CancellationToken {
        &self.draining
    }

    /// Marks a long-poll as waiting until the guard drops.
    pub fn waiting(&self) -> Waiting<'_> {
        self.waiters.fetch_add(1, Ordering::Relaxed);
        Waiting(&self.waiters)
    }

    /// Long-polls waiting right now.
    pub fn waiters(&self) -> usize {
        self.waiters.load(Ordering::Relaxed)
    }

    /// Stops granting long-polls: waiting ones return empty now.
    pub fn drain(&self) {
        self.draining.cancel();
    }
}
