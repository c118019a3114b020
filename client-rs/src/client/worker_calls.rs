//! The worker-facing calls: Lease with a long-poll deadline, Heartbeat, Checkpoint,
//! Complete and Fail, and the settles that lease the slot's next task.

use std::time::Duration;

use super::Client;
use crate::time::from_proto_duration;
use crate::{Error, pb};

impl Client {
    /// One Lease call. Its deadline is the request's `wait` plus the lease margin, so a
    /// long poll is not cut short by the default call timeout.
    pub async fn lease(&self, req: pb::LeaseRequest) -> Result<Vec<pb::LeasedTask>, Error> {
        let wait = from_proto_duration(req.wait.as_ref()).unwrap_or_default();
        let request = self.request_within(req, wait + self.lease_margin);
        Ok(self.broker.clone().lease(request).await?.into_inner().tasks)
    }

    /// One Heartbeat call; the statuses are in the order of `req.leases`.
    pub async fn heartbeat(
        &self,
        req: pb::HeartbeatRequest,
    ) -> Result<Vec<pb::LeaseStatus>, Error> {
        let n = req.leases.len();
        let statuses = self
            .broker
            .clone()
            .heartbeat(self.request(req))
            .await?
            .into_inner()
            .leases;
        if statuses.len() != n {
            return Err(Error::Malformed("HeartbeatResponse.leases"));
        }
        Ok(statuses)
    }

    /// One Checkpoint call.
    pub async fn checkpoint(
        &self,
        req: pb::CheckpointRequest,
    ) -> Result<pb::CheckpointResponse, Error> {
        Ok(self
            .broker
            .clone()
            .checkpoint(self.request(req))
            .await?
            .into_inner())
    }

    /// One Complete call (idempotent for the same lease token).
    pub async fn complete(&self, req: pb::CompleteRequest) -> Result<(), Error> {
        self.broker.clone().complete(self.request(req)).await?;
        Ok(())
    }

    /// Completes many tasks in one call; one result per completion, in order.
    pub async fn complete_many(
        &self,
        req: pb::CompleteManyRequest,
    ) -> Result<Vec<pb::CompleteResult>, Error> {
        Ok(self
            .broker
            .clone()
            .complete_many(self.request(req))
            .await?
            .into_inner()
            .results)
    }

    /// One Fail call (idempotent for the same lease token). With `lease_next` set, the
    /// call may wait as a Lease does, and the tasks leased are in `next_tasks`.
    pub async fn fail(&self, req: pb::FailRequest) -> Result<pb::FailResponse, Error> {
        let timeout = self.settle_timeout(req.lease_next.as_ref());
        let request = self.request_within(req, timeout);
        Ok(self.broker.clone().fail(request).await?.into_inner())
    }

    // ---- lease_next: settle and lease in one call ----

    /// A settle's call timeout: as a Lease's when it carries a waiting `lease_next`.
    fn settle_timeout(&self, next: Option<&pb::LeaseRequest>) -> Duration {
        match next.and_then(|n| from_proto_duration(n.wait.as_ref())) {
            Some(wait) if !wait.is_zero() => wait + self.lease_margin,
            _ => self.call_timeout,
        }
    }

    /// One Complete call that also leases (`req.lease_next`, after the completion is
    /// committed): the tasks leased, none when it is unset or nothing was ready.
    pub async fn complete_and_lease(
        &self,
        req: pb::CompleteRequest,
    ) -> Result<Vec<pb::LeasedTask>, Error> {
        let timeout = self.settle_timeout(req.lease_next.as_ref());
        let request = self.request_within(req, timeout);
        Ok(self
            .broker
            .clone()
            .complete(request)
            .await?
            .into_inner()
            .next_tasks)
    }

    /// One CompleteMany call that also leases (`req.lease_next`): one result per
    /// completion, in order, and the tasks leased.
    pub async fn complete_many_and_lease(
        &self,
        req: pb::CompleteManyRequest,
    ) -> Result<(Vec<pb::CompleteResult>, Vec<pb::LeasedTask>), Error> {
        let timeout = self.settle_timeout(req.lease_next.as_ref());
        let request = self.request_within(req, timeout);
        let r = self
            .broker
            .clone()
            .complete_many(request)
            .await?
            .into_inner();
        Ok((r.results, r.next_tasks))
    }
}
