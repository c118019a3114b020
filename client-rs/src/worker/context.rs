//! `TaskContext`: what a handler knows about the task it runs, how it saves progress
//! (`checkpoint`) and how it learns that it should stop (`cancelled`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::handler::TaskError;
use crate::time::{from_proto_timestamp, to_proto_duration};
use crate::{Client, Error, pb};

/// Why a handler's `cancelled()` fired. New reasons may be added: match with a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// The broker no longer holds the lease for this worker (it expired and was
    /// reclaimed, or the task was settled elsewhere). Nothing the handler returns is
    /// reported; another worker may already run the task.
    LeaseLost,
    /// An operator cancelled the task. Return (an error is fine): the worker reports
    /// Fail and the broker moves the task to CANCELLED.
    CancelRequested,
    /// The worker is stopping and the grace period is over; the task is handed back
    /// to the broker to run again at once.
    ShuttingDown,
    /// The task's deadline has passed: the broker will not accept the work any more.
    Deadline,
}

/// The state the worker runtime and a handler share for one leased task.
pub(crate) struct Shared {
    pub(crate) task: pb::LeasedTask,
    client: Client,
    cancel: CancellationToken,
    reason: OnceLock<CancelReason>,
    lost: AtomicBool,
    /// The handler is done and its outcome is being reported: a heartbeat's "lost"
    /// then only means the report got there first.
    settling: AtomicBool,
    checkpoint: Mutex<Option<Vec<u8>>>,
    /// Until when this worker believes the lease holds: the time a call that
    /// extended it was sent, plus the extension. Earlier than the broker's view.
    valid_until: Mutex<Instant>,
    /// The broker's `lease_expires_at`, as its last answer said.
    expires_at: Mutex<Option<SystemTime>>,
    /// Sent as `extend_by` with every checkpoint (the worker's lease duration).
    extend_by: Duration,
    /// Set for a context built by `testing::TestContext`: checkpoints and cancel
    /// checks are recorded there instead of sent to a broker.
    pub(crate) test: Option<Arc<crate::testing::Record>>,
}

impl Shared {
    pub(crate) fn new(
        task: pb::LeasedTask,
        client: Client,
        valid_until: Instant,
        extend_by: Duration,
    ) -> Self {
        let checkpoint = task.has_checkpoint.then(|| task.checkpoint.clone());
        let expires_at = from_proto_timestamp(task.lease_expires_at.as_ref());
        Shared {
            expires_at: Mutex::new(expires_at),
            extend_by,
            task,
            client,
            cancel: CancellationToken::new(),
            reason: OnceLock::new(),
            lost: AtomicBool::new(false),
            settling: AtomicBool::new(false),
            checkpoint: Mutex::new(checkpoint),
            valid_until: Mutex::new(valid_until),
            test: None,
        }
    }

    /// The state of a context no broker leased (`testing::TestContext`).
    pub(crate) fn for_test(
        task: pb::LeasedTask,
        client: Client,
        record: Arc<crate::testing::Record>,
    ) -> Self {
        Shared {
            test: Some(record),
            ..Shared::new(
                task,
                client,
                Instant::now() + Duration::from_secs(3600),
                Duration::from_secs(30),
            )
        }
    }

    /// Fires `cancelled()`; the first reason given is the one the handler sees.
    pub(crate) fn cancel(&self, reason: CancelReason) {
        let _ = self.reason.set(reason);
        self.cancel.cancel();
    }

    /// The lease is lost: cancels the handler with `LeaseLost` and logs it, once per
    /// task (WARN, with the task id), whichever of the broker's answer or the local
    /// clock noticed it first (docs/client-spec.md point 11).
    pub(crate) fn lose(&self, why: &str) {
        if !self.lost.swap(true, Ordering::SeqCst) {
            tracing::warn!(task_id = %self.task.task_id, "lease lost ({why}); handler cancelled, nothing more is reported");
        }
        self.cancel(CancelReason::LeaseLost);
    }

    pub(crate) fn start_settling(&self) {
        self.settling.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_settling(&self) -> bool {
        self.settling.load(Ordering::SeqCst)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    pub(crate) fn extended(&self, until: Instant) {
        // A poisoned lock only means another holder panicked mid-assignment of an
        // Instant, which cannot leave it half-written.
        let mut v = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
        *v = (*v).max(until);
    }

    /// Records the broker's `lease_expires_at` from a Heartbeat or Checkpoint answer.
    pub(crate) fn expires_at_is(&self, at: Option<SystemTime>) {
        if at.is_some() {
            *self.expires_at.lock().unwrap_or_else(|p| p.into_inner()) = at;
        }
    }

    pub(crate) fn cancel_reason(&self) -> Option<CancelReason> {
        self.reason.get().copied()
    }

    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a handler is given for one attempt of one task. Cheap to clone.
#[derive(Clone)]
pub struct TaskContext {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("task_id", &self.task_id())
            .field("queue", &self.queue())
            .field("attempt", &self.attempt())
            .finish_non_exhaustive()
    }
}

impl TaskContext {
    fn task(&self) -> &pb::LeasedTask {
        &self.shared.task
    }

    pub fn task_id(&self) -> &str {
        &self.task().task_id
    }

    pub fn queue(&self) -> &str {
        &self.task().queue
    }

    pub fn payload(&self) -> &[u8] {
        &self.task().payload
    }

    /// The payload decoded from JSON; a payload that does not decode is a permanent
    /// error (running it again would not help).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, TaskError> {
        serde_json::from_slice(self.payload())
            .map_err(|e| TaskError::permanent(format!("payload is not the expected JSON: {e}")))
    }

    pub fn key(&self) -> &str {
        &self.task().key
    }

    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.task().metadata
    }

    /// 1-based number of this attempt.
    pub fn attempt(&self) -> u32 {
        self.task().attempt
    }

    /// The attempt after which no retry is made.
    pub fn max_attempts(&self) -> u32 {
        self.task().max_attempts
    }

    /// The results of the task's dependencies that succeeded, by task id, as the
    /// lease carried them (empty when the broker left them out of the reply:
    /// read them with `Client::get_task` then).
    pub fn dependency_results(&self) -> &HashMap<String, Vec<u8>> {
        &self.task().dependency_results
    }

    /// The task is at most once: this is its only attempt.
    pub fn at_most_once(&self) -> bool {
        self.task().at_most_once
    }

    /// Strictly increases with every lease of the task: pass it to downstream stores
    /// so they can reject writes from a stale holder.
    pub fn fencing_token(&self) -> u64 {
        self.task().fencing_token
    }

    /// The task's deadline, if it has one.
    pub fn deadline(&self) -> Option<SystemTime> {
        from_proto_timestamp(self.task().deadline.as_ref())
    }

    pub fn lease_token(&self) -> &str {
        &self.task().lease_token
    }

    /// The latest checkpoint: saved by this attempt, or else handed over from an
    /// earlier one.
    pub fn last_checkpoint(&self) -> Option<Vec<u8>> {
        self.shared
            .checkpoint
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Saves progress durably; the next attempt (after a crash or a retry) gets it
    /// from `last_checkpoint()`. A lost lease is returned as an error (and fires
    /// `cancelled()`); a cancel request fires `cancelled()` too.
    pub async fn checkpoint(&self, checkpoint: impl Into<Vec<u8>>) -> Result<(), Error> {
        let checkpoint = checkpoint.into();
        let shared = &self.shared;
        if let Some(record) = &shared.test {
            let cancel = record.checkpointed(checkpoint.clone())?;
            *shared.checkpoint.lock().unwrap_or_else(|p| p.into_inner()) = Some(checkpoint);
            if cancel {
                shared.cancel(CancelReason::CancelRequested);
            }
            return Ok(());
        }
        let req = pb::CheckpointRequest {
            task_id: self.task_id().to_string(),
            lease_token: self.lease_token().to_string(),
            checkpoint: checkpoint.clone(),
            // A task that checkpoints keeps its lease between heartbeats too (spec point 3).
            extend_by: Some(to_proto_duration(shared.extend_by)),
        };
        let sent_at = Instant::now();
        match shared.client.checkpoint(req).await {
            Ok(r) => {
                *shared.checkpoint.lock().unwrap_or_else(|p| p.into_inner()) = Some(checkpoint);
                shared.extended(sent_at + shared.extend_by);
                shared.expires_at_is(from_proto_timestamp(r.lease_expires_at.as_ref()));
                if r.cancel_requested {
                    shared.cancel(CancelReason::CancelRequested);
                }
                Ok(())
            }
            Err(e) => {
                if e.is_lease_lost() {
                    shared.lose("Checkpoint answered LEASE_LOST");
                }
                Err(e)
            }
        }
    }

    /// Completes when the handler should stop: the lease was lost, an operator
    /// cancelled the task, or the worker's shutdown grace period ran out.
    pub fn cancelled(&self) -> WaitForCancellationFutureOwned {
        if let Some(record) = &self.shared.test {
            record.cancel_checked();
        }
        self.shared.cancel.clone().cancelled_owned()
    }

    pub fn is_cancelled(&self) -> bool {
        if let Some(record) = &self.shared.test {
            record.cancel_checked();
        }
        self.shared.cancel.is_cancelled()
    }

    /// When the lease runs out unless extended, as the broker last said (the lease,
    /// then each heartbeat and checkpoint).
    pub fn lease_expires_at(&self) -> Option<SystemTime> {
        *self
            .shared
            .expires_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Why `cancelled()` fired, once it has.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.shared.reason.get().copied()
    }

    /// A client on the worker's connection, for submitting follow-up tasks.
    pub fn client(&self) -> &Client {
        &self.shared.client
    }
}
