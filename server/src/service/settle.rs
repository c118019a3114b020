//! Complete and Fail: settle a lease. Both are idempotent for the token that
//! settled the task, so a worker may retry its report after a network error.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Broker, ServiceError, combine};
use crate::domain::TaskState;
use crate::domain::validate::{self, Invalid};
use crate::store::{CompleteParams, Completed, FailParams, FailResult, Settled, StoreError};

#[derive(Debug, Clone, Default)]
pub struct FailRequest {
    pub task_id: String,
    pub lease_token: String,
    pub error_message: String,
    pub non_retryable: bool,
    pub retry_after: Option<Duration>,
    /// Keep the retry for this worker (routing).
    pub prefer_same_worker: bool,
    /// Hold the task's key or bucket (and its retry) this long.
    pub cooldown: Option<crate::domain::bucket::CooldownAsk>,
}

/// One completion of CompleteMany.
#[derive(Debug, Clone, Default)]
pub struct CompleteItem {
    pub task_id: String,
    pub lease_token: String,
    pub result: Vec<u8>,
}

/// What CompleteMany did to one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteOutcome {
    Completed,
    LeaseLost,
    NotFound,
}

/// Completions per CompleteMany call at most (as tasks per Submit).
pub(super) const MAX_COMPLETE_BATCH: usize = 1000;

/// Longer error messages are cut (on a character boundary), not refused: the
/// worker is reporting a failure and should not fail again doing it.
const MAX_ERROR_BYTES: usize = 16 * 1024;

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

fn ran(leased_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Duration {
    leased_at
        .and_then(|at| (now - at).to_std().ok())
        .unwrap_or_default()
}

fn settled<T>(s: Settled<T>, task_id: &str) -> Result<T, ServiceError> {
    match s {
        Settled::Applied(v) | Settled::AlreadySettled(v) => Ok(v),
        Settled::LeaseLost => Err(ServiceError::LeaseLost {
            task_id: task_id.to_string(),
        }),
        Settled::NotFound => Err(ServiceError::not_found(task_id)),
    }
}

impl Broker {
    /// Checks one completion; field names get `prefix` (e.g. `completions[3].`).
    fn check_completion(
        &self,
        prefix: &str,
        task_id: &str,
        lease_token: &str,
        result: &[u8],
    ) -> Result<(), Invalid> {
        validate::identifier(&format!("{prefix}task_id"), task_id, 64)?;
        validate::identifier(&format!("{prefix}lease_token"), lease_token, 128)?;
        let max = self.settings.limits.max_result_bytes;
        validate::size(&format!("{prefix}result"), result.len(), max)
    }

    pub async fn complete(
        &self,
        task_id: String,
        lease_token: String,
        result: Vec<u8>,
    ) -> Result<(), ServiceError> {
        self.check_completion("", &task_id, &lease_token, &result)?;
        let p = CompleteParams {
            task_id,
            lease_token,
            result,
            now: self.clock.now(),
        };
        let now = p.now;
        let task_id = p.task_id.clone();
        let outcome = self
            .settle_completions(vec![p])
            .await?
            .pop()
            .ok_or_else(|| StoreError::Corrupt("no completion outcome".into()))?;
        if let Settled::Applied(c) = &outcome {
            self.metrics.completed(&c.queue, ran(c.leased_at, now));
        }
        settled(outcome, &task_id).map(|_| ())
    }

    /// Concurrent Complete and CompleteMany calls share one store call (one
    /// statement and commit on Postgres, one writer job on SQLite).
    async fn settle_completions(
        &self,
        ps: Vec<CompleteParams>,
    ) -> Result<Vec<Settled<Completed>>, StoreError> {
        let store = self.store.clone();
        let weight = ps.len();
        let settled = self
            .completes
            .call((), ps, weight, move |batch: Vec<Vec<CompleteParams>>| {
                let store = store.clone();
                async move {
                    let lengths: Vec<usize> = batch.iter().map(Vec::len).collect();
                    let all: Vec<CompleteParams> = batch.into_iter().flatten().collect();
                    let settled = store.task_complete_many(&all).await?;
                    combine::split(settled, &lengths)
                }
            })
            .await?;
        // Admission: a lease ended, so a gated queue may admit another.
        for s in &settled {
            if let Settled::Applied(c) = s {
                self.wake_gated(&c.queue);
            }
        }
        Ok(settled)
    }

    /// Completes many leases at once; input is checked all-or-nothing, outcomes are
    /// per task.
    pub async fn complete_many(
        &self,
        items: Vec<CompleteItem>,
    ) -> Result<Vec<CompleteOutcome>, ServiceError> {
        if items.len() > MAX_COMPLETE_BATCH {
            let message = format!("must hold at most {MAX_COMPLETE_BATCH} completions");
            return Err(Invalid::new("completions", message).into());
        }
        for (i, c) in items.iter().enumerate() {
            let prefix = format!("completions[{i}].");
            self.check_completion(&prefix, &c.task_id, &c.lease_token, &c.result)?;
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        let ps: Vec<CompleteParams> = items
            .into_iter()
            .map(|c| CompleteParams {
                task_id: c.task_id,
                lease_token: c.lease_token,
                result: c.result,
                now,
            })
            .collect();
        let settled = self.settle_completions(ps).await?;
        Ok(settled
            .into_iter()
            .map(|s| match s {
                Settled::Applied(c) => {
                    self.metrics.completed(&c.queue, ran(c.leased_at, now));
                    CompleteOutcome::Completed
                }
                Settled::AlreadySettled(_) => CompleteOutcome::Completed,
                Settled::LeaseLost => CompleteOutcome::LeaseLost,
                Settled::NotFound => CompleteOutcome::NotFound,
            })
            .collect())
    }

    pub async fn fail(&self, req: FailRequest) -> Result<FailResult, ServiceError> {
        validate::identifier("task_id", &req.task_id, 64)?;
        validate::identifier("lease_token", &req.lease_token, 128)?;
        if let Some(d) = req.retry_after {
            let max = self.settings.limits.max_backoff;
            validate::duration_in("retry_after", d, Duration::ZERO, max)?;
        }
        // A cooldown holds the leased task's own key or bucket; its retry
        // waits at least as long.
        let cooldown = match &req.cooldown {
            Some(ask) => Some((
                self.cooldown_target(&req.task_id, &req.lease_token, ask)
                    .await?,
                ask.duration,
            )),
            None => None,
        };
        let retry_after = match &cooldown {
            Some((_, d)) => Some(req.retry_after.map_or(*d, |r| r.max(*d))),
            None => req.retry_after,
        };
        let p = FailParams {
            task_id: req.task_id,
            lease_token: req.lease_token,
            error: validate::storable_text(truncate(req.error_message, MAX_ERROR_BYTES)),
            non_retryable: req.non_retryable,
            retry_after,
            now: self.clock.now(),
            jitter_unit: rand::random(),
            prefer_same_worker: req.prefer_same_worker,
        };
        let outcome = self.store.task_fail(&p).await?;
        // Only a fail that held the lease sets the cooldown.
        if let (Settled::Applied(_), Some((target, d))) = (&outcome, cooldown) {
            self.cooldown_set(target, d, &p.task_id, p.now).await?;
        }
        if let Settled::Applied(r) = &outcome {
            let dead = r.state == TaskState::Dead;
            self.metrics.failed(&r.queue, ran(r.leased_at, p.now), dead);
            if r.next_run_at.is_some() {
                // A retry kept for one worker wakes every waiter of the queue,
                // so that worker is among them (routing). (The worker
                // that failed it usually asks again at once anyway.)
                let n = if p.prefer_same_worker { 256 } else { 1 };
                self.dispatch.wake_n(Some(&r.queue), n);
            } else {
                self.wake_gated(&r.queue);
            }
        }
        settled(outcome, &p.task_id)
    }
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("héllo".into(), 2), "h");
        assert_eq!(truncate("abc".into(), 10), "abc");
    }
}
