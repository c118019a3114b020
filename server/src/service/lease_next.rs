//! Settling and leasing in one call: Complete, CompleteMany and Fail
//! may carry a `lease_next`, a LeaseRequest answered after the settle commits, so
//! a one-at-a-time worker makes two calls per task instead of three.
//!
//! The order is fixed: the lease request is checked first (a bad one changes
//! nothing), the settle commits exactly as it does alone, and only then does the
//! broker lease, exactly as Lease would. A settle that fails leases nothing. A
//! lease that fails after the settle committed answers no tasks (and is logged):
//! the settle's answer stands, and the worker's next Lease meets the error.

use super::lease::LeasePlan;
use super::{Broker, CompleteItem, CompleteOutcome, FailRequest, LeaseRequest, ServiceError};
use crate::store::{FailResult, TaskRecord};

/// What a CompleteResult takes in a CompleteManyResponse besides its task id,
/// at most: its tag and length, the id's tag and length, the outcome.
const COMPLETE_RESULT_BYTES: u64 = 8;

/// What a FailResponse takes besides its next tasks, at most: the state and
/// the next run time with their tags.
const FAIL_RESPONSE_BYTES: u64 = 32;

/// A `lease_next` that passed its checks.
#[derive(Debug)]
pub struct LeaseNext {
    req: LeaseRequest,
    plan: LeasePlan,
}

impl Broker {
    /// Checks a settle's `lease_next`, changing nothing; errors name
    /// `lease_next.<field>`.
    pub fn lease_next_check(
        &self,
        req: Option<LeaseRequest>,
    ) -> Result<Option<LeaseNext>, ServiceError> {
        let Some(req) = req else { return Ok(None) };
        let plan = self.lease_plan(&req).map_err(|mut e| {
            e.field = format!("lease_next.{}", e.field);
            e
        })?;
        Ok(Some(LeaseNext { req, plan }))
    }

    /// Leases for a settle that has committed. Never an error: a failure is
    /// logged and answers no tasks.
    pub async fn lease_next(&self, next: Option<LeaseNext>) -> Vec<TaskRecord> {
        let Some(LeaseNext { req, plan }) = next else {
            return Vec::new();
        };
        match self.lease_planned(req, plan).await {
            Ok(tasks) => tasks,
            Err(e) => {
                tracing::warn!(error = %e, cause = ?std::error::Error::source(&e),
                    "lease_next failed after the settle committed; answering no tasks");
                Vec::new()
            }
        }
    }

    /// Complete, then lease `next`.
    pub async fn complete_leasing(
        &self,
        task_id: String,
        lease_token: String,
        result: Vec<u8>,
        next: Option<LeaseRequest>,
    ) -> Result<Vec<TaskRecord>, ServiceError> {
        let next = self.lease_next_check(next)?;
        self.complete(task_id, lease_token, result).await?;
        Ok(self.lease_next(next).await)
    }

    /// CompleteMany, then lease `next` (whatever the completions' outcomes: a
    /// lost lease there is an outcome, not an error).
    pub async fn complete_many_leasing(
        &self,
        items: Vec<CompleteItem>,
        next: Option<LeaseRequest>,
    ) -> Result<(Vec<CompleteOutcome>, Vec<TaskRecord>), ServiceError> {
        let mut next = self.lease_next_check(next)?;
        if let Some(n) = next.as_mut() {
            // The reply's CompleteResults come first: a task id, an outcome and
            // their tags and lengths each.
            let results: u64 = items
                .iter()
                .map(|i| i.task_id.len() as u64 + COMPLETE_RESULT_BYTES)
                .sum();
            n.plan.reserve(results);
        }
        let outcomes = self.complete_many(items).await?;
        Ok((outcomes, self.lease_next(next).await))
    }

    /// Fail, then lease `next`.
    pub async fn fail_leasing(
        &self,
        req: FailRequest,
        next: Option<LeaseRequest>,
    ) -> Result<(FailResult, Vec<TaskRecord>), ServiceError> {
        let mut next = self.lease_next_check(next)?;
        if let Some(n) = next.as_mut() {
            n.plan.reserve(FAIL_RESPONSE_BYTES);
        }
        let out = self.fail(req).await?;
        Ok((out, self.lease_next(next).await))
    }
}
