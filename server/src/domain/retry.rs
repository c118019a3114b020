//! Retry policy and backoff math: `run_at = now + min(max_backoff, initial * multiplier^(attempt-1))`,
//! spread by +/- jitter.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::task::FailureDecision;

/// An effective retry policy (defaults already applied).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts allowed, counting the first.
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    /// At least 1.
    pub backoff_multiplier: f64,
    pub max_backoff: Duration,
    /// 0 to 1: each backoff is scaled by a factor in `[1 - jitter, 1 + jitter]`.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_secs(10),
            backoff_multiplier: 2.0,
            max_backoff: Duration::from_secs(3600),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// The backoff after failed attempt number `attempt` (1-based). `unit` is a random
    /// sample in `[0, 1)` that picks the point inside the jitter band. Never exceeds
    /// `max_backoff` (jitter included), never negative, never overflows.
    pub fn backoff(&self, attempt: u32, unit: f64) -> Duration {
        let exp = attempt.saturating_sub(1).min(1000) as i32;
        let base = self.initial_backoff.as_secs_f64() * self.backoff_multiplier.powi(exp);
        let max = self.max_backoff.as_secs_f64();
        let capped = if base.is_finite() { base.min(max) } else { max };
        let factor = 1.0 + self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        let jittered = (capped * factor).clamp(0.0, max);
        Duration::from_secs_f64(jittered)
    }
}

/// Flow: the delay RetryPolicy.schedule gives after failed attempt number
/// `attempt` (1-based): the attempt's entry, the last one repeating, spread by
/// +/- `jitter` as `unit` picks. `None` when there is no schedule.
pub fn scheduled_backoff(
    schedule: &[Duration],
    attempt: u32,
    jitter: f64,
    unit: f64,
) -> Option<Duration> {
    let last = schedule.len().checked_sub(1)?;
    let i = (attempt.saturating_sub(1) as usize).min(last);
    let base = schedule[i].as_secs_f64();
    let factor = 1.0 + jitter.clamp(0.0, 1.0) * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
    Some(Duration::from_secs_f64((base * factor).max(0.0)))
}

/// What one failed attempt leads to.
#[derive(Debug, Clone, Copy)]
pub struct Failure {
    /// The attempt that failed (1-based).
    pub attempt: u32,
    /// The attempt number after which no retry is made.
    pub attempts_allowed: u32,
    pub non_retryable: bool,
    pub cancel_requested: bool,
    /// Overrides the policy's backoff.
    pub retry_after: Option<Duration>,
}

/// Applies the retry policy to a failed attempt.
pub fn decide_failure(
    policy: &RetryPolicy,
    failure: &Failure,
    now: DateTime<Utc>,
    unit: f64,
) -> FailureDecision {
    if failure.cancel_requested {
        return FailureDecision::Cancelled;
    }
    if failure.non_retryable || failure.attempt >= failure.attempts_allowed {
        return FailureDecision::Dead;
    }
    let delay = failure
        .retry_after
        .unwrap_or_else(|| policy.backoff(failure.attempt, unit));
    let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
    let run_at = now
        .checked_add_signed(delay)
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    FailureDecision::Retry { run_at }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> RetryPolicy {
        RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn backoff_grows_by_multiplier_and_caps() {
        let p = no_jitter();
        assert_eq!(p.backoff(1, 0.5), Duration::from_secs(10));
        assert_eq!(p.backoff(2, 0.5), Duration::from_secs(20));
        assert_eq!(p.backoff(3, 0.5), Duration::from_secs(40));
        assert_eq!(p.backoff(20, 0.5), Duration::from_secs(3600));
        assert_eq!(p.backoff(u32::MAX, 0.5), Duration::from_secs(3600));
    }

    #[test]
    fn jitter_stays_inside_its_band_and_under_the_cap() {
        let p = RetryPolicy::default();
        for i in 0..=100 {
            let unit = i as f64 / 100.0;
            for attempt in [1, 2, 5, 12, 40] {
                let b = p.backoff(attempt, unit).as_secs_f64();
                let base = (10.0 * 2f64.powi(attempt as i32 - 1)).min(3600.0);
                assert!(
                    b >= base * 0.8 - 1e-6 && b <= base * 1.2 + 1e-6,
                    "{attempt} {unit} {b}"
                );
                assert!(b <= 3600.0 + 1e-6);
            }
        }
    }

    #[test]
    fn backoff_is_monotone_in_attempt_without_jitter() {
        let p = RetryPolicy {
            backoff_multiplier: 1.7,
            ..no_jitter()
        };
        let mut last = Duration::ZERO;
        for attempt in 1..200 {
            let b = p.backoff(attempt, 0.3);
            assert!(b >= last);
            last = b;
        }
    }

    #[test]
    fn zero_backoff_retries_at_once() {
        let p = RetryPolicy {
            initial_backoff: Duration::ZERO,
            ..RetryPolicy::default()
        };
        assert_eq!(p.backoff(3, 0.9), Duration::ZERO);
    }

    fn failure(attempt: u32) -> Failure {
        Failure {
            attempt,
            attempts_allowed: 3,
            non_retryable: false,
            cancel_requested: false,
            retry_after: None,
        }
    }

    #[test]
    fn failures_retry_until_the_budget_is_spent() {
        let now = DateTime::<Utc>::UNIX_EPOCH;
        let p = no_jitter();
        assert_eq!(
            decide_failure(&p, &failure(1), now, 0.5),
            FailureDecision::Retry {
                run_at: now + chrono::Duration::seconds(10)
            }
        );
        assert_eq!(
            decide_failure(&p, &failure(3), now, 0.5),
            FailureDecision::Dead
        );
    }

    #[test]
    fn non_retryable_is_dead_and_cancel_wins() {
        let now = DateTime::<Utc>::UNIX_EPOCH;
        let p = no_jitter();
        let f = Failure {
            non_retryable: true,
            ..failure(1)
        };
        assert_eq!(decide_failure(&p, &f, now, 0.5), FailureDecision::Dead);
        let c = Failure {
            cancel_requested: true,
            ..f
        };
        assert_eq!(decide_failure(&p, &c, now, 0.5), FailureDecision::Cancelled);
    }

    #[test]
    fn retry_after_overrides_backoff() {
        let now = DateTime::<Utc>::UNIX_EPOCH;
        let f = Failure {
            retry_after: Some(Duration::from_millis(1500)),
            ..failure(1)
        };
        assert_eq!(
            decide_failure(&no_jitter(), &f, now, 0.5),
            FailureDecision::Retry {
                run_at: now + chrono::Duration::milliseconds(1500)
            }
        );
    }

    #[test]
    fn a_schedule_gives_each_retry_its_delay_and_repeats_the_last() {
        let m = |v: u64| Duration::from_secs(60 * v);
        let s = [m(1), m(5), m(30)];
        assert_eq!(scheduled_backoff(&s, 1, 0.0, 0.9), Some(m(1)));
        assert_eq!(scheduled_backoff(&s, 2, 0.0, 0.9), Some(m(5)));
        assert_eq!(scheduled_backoff(&s, 3, 0.0, 0.9), Some(m(30)));
        assert_eq!(scheduled_backoff(&s, 9, 0.0, 0.9), Some(m(30)));
        assert_eq!(scheduled_backoff(&[], 1, 0.0, 0.5), None);
        // Jitter still applies: +/-20% of 5 minutes.
        assert_eq!(scheduled_backoff(&s, 2, 0.2, 0.0), Some(m(4)));
        assert_eq!(scheduled_backoff(&s, 2, 0.2, 1.0), Some(m(6)));
    }
}
