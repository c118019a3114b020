//! Long-poll wake-ups. A Lease that finds nothing waits here, not on the database:
//! every change that makes a task pending calls [`Dispatcher::wake`] for its queue
//! (locally, and through the store's notifications from other replicas).

pub mod parking;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Most waiters one event wakes; the rest are reached by passing the wake-up on.
const MAX_WAKE: usize = 256;

#[derive(Default)]
pub struct Dispatcher {
    /// One Notify per queue that a long-poll waits on right now. An entry goes
    /// with the last [`Handles`] that holds it, so Leases over ever new queue
    /// names leave nothing behind.
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

    /// The Notify of each queue, created on first use and forgotten when the last
    /// holder drops it.
    pub fn handles(&self, queues: &[String]) -> Handles<'_> {
        // The lock is held for a map lookup only, never across an await.
        let mut map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        Handles {
            dispatcher: self,
            held: queues
                .iter()
                .map(|q| (q.clone(), map.entry(q.clone()).or_default().clone()))
                .collect(),
        }
    }

    /// Queues with a Notify right now (those some long-poll holds).
    pub fn queues_tracked(&self) -> usize {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// A wake-up taken by a long-poll that has not yet looked for its task: if the
    /// long-poll goes away (its call cancelled) before [`PassOn::done`], each of
    /// its queues wakes another waiter, so the wake-up is not lost with it.
    pub fn pass_on(&self, queues: &[String]) -> PassOn<'_> {
        PassOn {
            dispatcher: self,
            queues: Some(queues.to_vec()),
        }
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

/// The Notify handles of one long-poll's queues (see [`Dispatcher::handles`]).
pub struct Handles<'a> {
    dispatcher: &'a Dispatcher,
    held: Vec<(String, Arc<Notify>)>,
}

impl Handles<'_> {
    pub fn iter(&self) -> impl Iterator<Item = &Notify> {
        self.held.iter().map(|(_, n)| n.as_ref())
    }
}

impl Drop for Handles<'_> {
    fn drop(&mut self) {
        let mut map = self
            .dispatcher
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (q, n) in self.held.drain(..) {
            // Handles are only cloned under this lock, so the count is exact: the
            // map's and this one mean nobody else waits on the queue.
            if Arc::strong_count(&n) == 2 {
                map.remove(&q);
            }
        }
    }
}

/// See [`Dispatcher::pass_on`].
pub struct PassOn<'a> {
    dispatcher: &'a Dispatcher,
    queues: Option<Vec<String>>,
}

impl PassOn<'_> {
    /// The long-poll looked: the wake-up served it.
    pub fn done(mut self) {
        self.queues = None;
    }
}

impl Drop for PassOn<'_> {
    fn drop(&mut self) {
        for q in self.queues.take().into_iter().flatten() {
            self.dispatcher.wake(Some(&q));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_forgotten_with_its_last_waiter() {
        let d = Dispatcher::new();
        let names: Vec<String> = (0..1000).map(|i| format!("q{i}")).collect();
        for chunk in names.chunks(7) {
            let h = d.handles(chunk);
            assert_eq!(h.iter().count(), chunk.len());
        }
        assert_eq!(d.queues_tracked(), 0);
        let a = d.handles(&["x".to_string(), "y".to_string()]);
        let b = d.handles(&["x".to_string()]);
        drop(a);
        assert_eq!(d.queues_tracked(), 1, "x is still waited on");
        drop(b);
        assert_eq!(d.queues_tracked(), 0);
    }

    #[tokio::test]
    async fn a_dropped_wake_up_is_passed_on() {
        let d = Dispatcher::new();
        let q = ["q".to_string()];
        let (first, second) = (d.handles(&q), d.handles(&q));
        let (n1, n2) = (
            first.iter().next().unwrap().notified(),
            second.iter().next().unwrap().notified(),
        );
        tokio::pin!(n1, n2);
        n1.as_mut().enable();
        n2.as_mut().enable();
        d.wake(Some("q"));
        n1.await;
        // The first waiter took the wake-up and went away before using it.
        drop(d.pass_on(&q));
        n2.await;
        // One that used it passes nothing on: no permit is left behind.
        d.pass_on(&q).done();
        let n3 = second.iter().next().unwrap().notified();
        tokio::pin!(n3);
        assert!(futures::poll!(n3.as_mut()).is_pending());
    }
}
