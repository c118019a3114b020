//! Heartbeat (many leases at once) and Checkpoint (durable progress under a lease).

use std::time::Duration;

use super::{Broker, ServiceError};
use crate::domain::validate::{self, Invalid};
use crate::store::{CheckpointParams, LeaseRef, LeaseState, Settled};

#[derive(Debug, Clone, Default)]
pub struct CheckpointRequest {
    pub task_id: String,
    pub lease_token: String,
    pub checkpoint: Vec<u8>,
    pub extend_by: Option<Duration>,
}

impl Broker {
    /// `extend_by` inside the lease bounds of the broker and of each named task's
    /// queue (looked up only when some queue has bounds of its own).
    async fn check_extend(
        &self,
        extend_by: Option<Duration>,
        task_ids: &[&str],
    ) -> Result<(), ServiceError> {
        let Some(d) = extend_by else {
            return Ok(());
        };
        let limits = &self.settings.limits;
        validate::duration_in("extend_by", d, limits.min_lease, limits.max_lease)?;
        if !self.settings.has_lease_overrides() || task_ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = task_ids.iter().map(|id| id.to_string()).collect();
        let queues = self.store.task_queues(&ids).await?;
        for queue in task_ids.iter().filter_map(|id| queues.get(*id)) {
            let (min, max) = self.settings.lease_bounds(std::slice::from_ref(queue));
            if d < min || d > max {
                return Err(Invalid::new(
                    "extend_by",
                    format!(
                        "must be between {} and {} for queue {queue}",
                        humantime::format_duration(min),
                        humantime::format_duration(max)
                    ),
                )
                .into());
            }
        }
        Ok(())
    }

    /// Extends every live lease; a stale one is reported lost, not an error.
    pub async fn heartbeat(
        &self,
        leases: Vec<LeaseRef>,
        extend_by: Option<Duration>,
    ) -> Result<Vec<LeaseState>, ServiceError> {
        let max = self.settings.limits.max_heartbeat_batch;
        if leases.len() > max {
            return Err(Invalid::new("leases", format!("must hold at most {max} leases")).into());
        }
        for (i, l) in leases.iter().enumerate() {
            validate::identifier(&format!("leases[{i}].task_id"), &l.task_id, 64)?;
            validate::identifier(&format!("leases[{i}].lease_token"), &l.lease_token, 128)?;
        }
        let ids: Vec<&str> = leases.iter().map(|l| l.task_id.as_str()).collect();
        self.check_extend(extend_by, &ids).await?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .store
            .lease_extend(&leases, extend_by, self.clock.now())
            .await?)
    }

    pub async fn checkpoint(&self, req: CheckpointRequest) -> Result<LeaseState, ServiceError> {
        validate::identifier("task_id", &req.task_id, 64)?;
        validate::identifier("lease_token", &req.lease_token, 128)?;
        validate::size(
            "checkpoint",
            req.checkpoint.len(),
            self.settings.limits.max_checkpoint_bytes,
        )?;
        self.check_extend(req.extend_by, &[&req.task_id]).await?;
        let p = CheckpointParams {
            task_id: req.task_id,
            lease_token: req.lease_token,
            checkpoint: req.checkpoint,
            extend_by: req.extend_by,
            now: self.clock.now(),
        };
        match self.store.task_checkpoint(&p).await? {
            Settled::Applied(s) | Settled::AlreadySettled(s) => Ok(s),
            Settled::LeaseLost => Err(ServiceError::LeaseLost { task_id: p.task_id }),
            Settled::NotFound => Err(ServiceError::not_found(&p.task_id)),
        }
    }
}
