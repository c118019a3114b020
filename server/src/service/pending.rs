//! Backpressure on Submit (`max_pending`, `max_pending_bytes`): the check made
//! before a Submit stores anything, against each queue's view of its waiting
//! tasks (`domain::pending`). A queue's count is read from the store at most
//! once a second per broker, by one caller at a time; between counts the view
//! moves with what this broker admits and leases, so a Submit costs no read in
//! proportion to the backlog.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use super::submit::PENDING_RETRY_AFTER;
use super::{Broker, ServiceError};
use crate::domain::pending::{Held, Look, PendingCounts};
use crate::store::{NewTask, TaskRecord};

/// The broker's views of its limited queues.
#[derive(Default)]
pub(super) struct Pending {
    counts: Mutex<PendingCounts>,
    /// Told when a count has been read, or its reading ended without one.
    counted: Notify,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, PendingCounts> {
        // The views hold plain numbers: a panic elsewhere leaves them usable.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A count being read. Dropped before it reports one (a store error, or the
/// Submit given up mid-read), it lets the next caller read instead; either way
/// the callers waiting for it look again.
struct Reading<'a> {
    pending: &'a Pending,
    queue: &'a str,
    done: bool,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.pending.lock().count_failed(self.queue);
        }
        self.pending.counted.notify_waiters();
    }
}

impl Broker {
    /// Refuses the call when it would take a queue past its `max_pending` or
    /// `max_pending_bytes` (every new task counted, also those a key may
    /// deduplicate), and otherwise adds its tasks to the queues' views. A call
    /// that alone exceeds a limit never fits: it is refused without a retry hint.
    pub(super) async fn check_pending(&self, new: &[NewTask]) -> Result<(), ServiceError> {
        let mut per_queue: Vec<(&str, Held)> = Vec::new();
        for t in new {
            let bytes = t.payload.len() as u64;
            match per_queue.iter_mut().find(|(q, _)| *q == t.queue) {
                Some((_, h)) => {
                    h.tasks += 1;
                    h.bytes += bytes;
                }
                None => per_queue.push((&t.queue, Held::new(1, bytes))),
            }
        }
        let mut limited = Vec::new();
        for &(queue, add) in &per_queue {
            let Some(live) = self.settings.queue(queue) else {
                continue;
            };
            let c = &live.config;
            if c.max_pending == 0 && c.max_pending_bytes == 0 {
                continue;
            }
            self.pending_view_ready(queue).await?;
            limited.push((queue, add, c.max_pending, c.max_pending_bytes));
        }
        // Checked and admitted under one lock, so this broker's concurrent
        // calls never pass a limit together on one view.
        let mut counts = self.pending.lock();
        for (queue, add, max_pending, max_pending_bytes) in limited {
            let held = counts.view(queue).unwrap_or_default();
            let over =
                |limit: u64, held: u64, add: u64| limit > 0 && held.saturating_add(add) > limit;
            let refused = if over(max_pending, held.tasks, add.tasks) {
                Some((
                    "max_pending",
                    format!(
                        "{} waiting tasks + {} > max_pending {max_pending}",
                        held.tasks, add.tasks
                    ),
                    add.tasks > max_pending,
                ))
            } else if over(max_pending_bytes, held.bytes, add.bytes) {
                Some((
                    "max_pending_bytes",
                    format!(
                        "{} waiting payload bytes + {} > max_pending_bytes {max_pending_bytes}",
                        held.bytes, add.bytes
                    ),
                    add.bytes > max_pending_bytes,
                ))
            } else {
                None
            };
            if let Some((limit, what, never_fits)) = refused {
                drop(counts);
                self.metrics.submit_refused(queue);
                return Err(ServiceError::QueueFull {
                    queue: queue.to_string(),
                    limit,
                    what,
                    retry_after: if never_fits {
                        None
                    } else {
                        Some(PENDING_RETRY_AFTER)
                    },
                });
            }
        }
        // Every queue of the call that has a view, limited now or not: a limit
        // set again soon after it was lifted starts from a view that is right.
        for (queue, add) in per_queue {
            counts.admit(queue, add);
        }
        Ok(())
    }

    /// Makes `queue`'s view usable: reads a new count when it has none or its
    /// count is too old and no other caller is reading one.
    async fn pending_view_ready(&self, queue: &str) -> Result<(), ServiceError> {
        loop {
            // Registered before looking, so a count reported between the look
            // and the wait is not missed.
            let notified = self.pending.counted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.clock.now();
            let look = self.pending.lock().look(queue, now);
            match look {
                Look::Use => return Ok(()),
                Look::Wait => notified.await,
                Look::Count => {
                    let mut reading = Reading {
                        pending: &self.pending,
                        queue,
                        done: false,
                    };
                    self.metrics.pending_counted(queue);
                    let (tasks, bytes) = self.store.queue_pending(queue).await?;
                    self.pending
                        .lock()
                        .counted(queue, now, Held::new(tasks, bytes));
                    reading.done = true;
                    return Ok(());
                }
            }
        }
    }

    /// Tasks this broker leased no longer wait: their queues' views drop them.
    pub(super) fn pending_leased(&self, tasks: &[TaskRecord]) {
        if tasks.is_empty() {
            return;
        }
        let mut counts = self.pending.lock();
        if counts.is_empty() {
            return;
        }
        for t in tasks {
            counts.depart(&t.queue, Held::new(1, t.payload.len() as u64));
        }
    }
}
