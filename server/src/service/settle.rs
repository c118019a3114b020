//! Complete and Fail: settle a lease. Both are idempotent for the token that
//! settled the task, so a worker may retry its report after a network error.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Broker, ServiceError};
use crate::domain::TaskState;
use crate::domain::validate;
use crate::store::{CompleteParams, FailParams, FailResult, Settled};

#[derive(Debug, Clone, Default)]
pub struct FailRequest {
    pub task_id: String,
    pub lease_token: String,
    pub error_message: String,
    pub non_retryable: bool,
    pub retry_after: Option<Duration>,
}

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
    pub async fn complete(
        &self,
        task_id: String,
        lease_token: String,
        result: Vec<u8>,
    ) -> Result<(), ServiceError> {
        validate::identifier("task_id", &task_id, 64)?;
        validate::identifier("lease_token", &lease_token, 128)?;
        validate::size(
            "result",
            result.len(),
            self.settings.limits.max_result_bytes,
        )?;
        let p = CompleteParams {
            task_id,
            lease_token,
            result,
            now: self.clock.now(),
        };
        let outcome = self.store.task_complete(&p).await?;
        if let Settled::Applied(c) = &outcome {
            self.metrics.completed(&c.queue, ran(c.leased_at, p.now));
        }
        settled(outcome, &p.task_id).map(|_| ())
    }

    pub async fn fail(&self, req: FailRequest) -> Result<FailResult, ServiceError> {
        validate::identifier("task_id", &req.task_id, 64)?;
        validate::identifier("lease_token", &req.lease_token, 128)?;
        if let Some(d) = req.retry_after {
            let max = self.settings.limits.max_backoff;
            validate::duration_in("retry_after", d, Duration::ZERO, max)?;
        }
        let p = FailParams {
            task_id: req.task_id,
            lease_token: req.lease_token,
            error: truncate(req.error_message, MAX_ERROR_BYTES),
            non_retryable: req.non_retryable,
            retry_after: req.retry_after,
            now: self.clock.now(),
            jitter_unit: rand::random(),
        };
        let outcome = self.store.task_fail(&p).await?;
        if let Settled::Applied(r) = &outcome {
            let dead = r.state == TaskState::Dead;
            self.metrics.failed(&r.queue, ran(r.leased_at, p.now), dead);
            if r.next_run_at.is_some() {
                self.dispatch.wake(Some(&r.queue));
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
