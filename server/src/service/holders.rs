//! Who holds a lease. A worker token bound to worker ids (`workers=` in the tokens
//! file, api/auth.rs) may heartbeat, checkpoint and settle only the leases held under
//! an id it may use; the lease's own worker id decides, as recorded when it was
//! leased, since Checkpoint, Complete and Fail carry no worker id. A token bound to
//! queues (`queues=`) may do so only for the leases of tasks in those queues; the
//! task's queue never changes.

use super::{Broker, ServiceError};
use crate::domain::validate::{self, Invalid};
use crate::store::LeaseRef;

/// The call whose leases are checked: it names the fields and bounds the batch as
/// the call itself does, before any lease is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    /// Checkpoint, Complete or Fail: one lease, fields `task_id` and `lease_token`.
    One,
    /// Heartbeat: `leases[i].task_id`, at most `limits.max_heartbeat_batch`.
    Heartbeat,
    /// CompleteMany: `completions[i].task_id`, at most its batch limit.
    CompleteMany,
}

/// Leases read at once while checking a batch.
const READS_IN_FLIGHT: usize = 8;

impl Broker {
    /// PERMISSION_DENIED naming `worker_id` when any of `leases` is held under a
    /// worker id that `may_use` refuses, or naming `queue` when its task is in a
    /// queue that `may_use_queue` refuses. A token that holds no lease on its task
    /// passes: the call itself then answers LEASE_LOST or NOT_FOUND and changes
    /// nothing. The check reads each task once; a lease token names one lease and
    /// its worker id never changes, nor does a task's queue, so the answer cannot
    /// go stale before the call.
    pub async fn check_lease_holders(
        &self,
        call: HeldBy,
        leases: &[LeaseRef],
        may_use: impl Fn(&str) -> bool,
        may_use_queue: impl Fn(&str) -> bool,
    ) -> Result<(), ServiceError> {
        let (list, max) = match call {
            HeldBy::One => ("", 1),
            HeldBy::Heartbeat => ("leases", self.settings.limits.max_heartbeat_batch),
            HeldBy::CompleteMany => ("completions", super::settle::MAX_COMPLETE_BATCH),
        };
        let field = |i: usize, name: &str| match list {
            "" => name.to_string(),
            _ => format!("{list}[{i}].{name}"),
        };
        if leases.len() > max {
            return Err(Invalid::new(list, format!("must hold at most {max} leases")).into());
        }
        for (i, l) in leases.iter().enumerate() {
            validate::identifier(&field(i, "task_id"), &l.task_id, 64)?;
            validate::identifier(&field(i, "lease_token"), &l.lease_token, 128)?;
        }
        for chunk in leases.chunks(READS_IN_FLIGHT) {
            let reads = chunk.iter().map(|l| self.store.task_get(&l.task_id));
            let tasks = futures::future::try_join_all(reads).await?;
            for (l, task) in chunk.iter().zip(tasks) {
                let Some(task) = task else { continue };
                if task.lease_token.as_deref() != Some(l.lease_token.as_str()) {
                    continue;
                }
                if !may_use_queue(&task.queue) {
                    return Err(ServiceError::PermissionDenied {
                        field: "queue".into(),
                        message: format!(
                            "the lease on task {} is of a queue this token may not use",
                            l.task_id
                        ),
                    });
                }
                let holder = task.leased_by.as_deref().unwrap_or_default();
                if !may_use(holder) {
                    return Err(ServiceError::PermissionDenied {
                        field: "worker_id".into(),
                        message: format!(
                            "the lease on task {} is held under a worker id this token may not use",
                            l.task_id
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
