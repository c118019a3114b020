//! What a running worker reports about itself, for logs, metrics and tests
//! (`Worker::subscribe`). Events are best-effort: a slow subscriber misses some
//! (the broadcast channel's `Lagged`), and the worker never waits for one.

use std::time::SystemTime;

/// One thing that happened in a worker.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerEvent {
    /// A Lease call returned `count` tasks after asking for `asked` (the free slots).
    Leased { asked: u32, count: usize },
    /// A task's handler is starting.
    Started {
        task_id: String,
        queue: String,
        attempt: u32,
    },
    /// One Heartbeat call answered, one entry per lease it named.
    Heartbeat { leases: Vec<LeaseUpdate> },
    /// Leasing stopped because shutdown was asked for; running handlers continue
    /// for the grace period.
    Stopping,
    /// A Complete was handed to the worker's completer; `queued` completions now
    /// wait for the settle call in flight to return, to go together in one
    /// CompleteMany (1 when none is in flight: it is sent at once).
    SettleQueued { queued: usize },
    /// A task's handler ended and its outcome was reported (or not, see `Outcome`).
    Finished { task_id: String, outcome: Outcome },
}

/// What one Heartbeat said about one lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseUpdate {
    pub task_id: String,
    pub lost: bool,
    pub cancel_requested: bool,
    /// The broker's new expiry; `None` when the lease is lost.
    pub lease_expires_at: Option<SystemTime>,
}

/// How a task's attempt ended, from the worker's side.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Complete was accepted.
    Completed,
    /// Fail was accepted: `retryable` as the handler asked (a panic is retryable).
    Failed { message: String, retryable: bool },
    /// The lease was lost: nothing was reported, as the broker had already moved on.
    Abandoned,
    /// The handler was cut off at the end of the shutdown grace period and the task
    /// was handed back (Fail, retryable, retry_after 0).
    Interrupted,
    /// The report could not be delivered before the lease ran out; the broker will
    /// reclaim the task when it expires.
    Unreported { error: String },
}
