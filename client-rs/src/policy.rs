//! Policy declared with a handler (docs/client-spec.md point 20): the retry defaults of
//! a queue's tasks, the error types that fail an attempt for good, and the queue's own
//! slots in the worker.
//!
//! - [`QueuePolicy`]: what [`crate::Worker`]'s `policy`/`task` and [`crate::TaskDef`] take.
//! - `RetryDefaults`: the queue -> retry table a [`crate::Client`] and its clones share;
//!   every Submit through them fills the unset retry fields of a spec from it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::pb;
use crate::time::to_proto_duration;
use crate::worker::TaskError;
use crate::worker::handler::BoxHandler;

type ErrorMatch = Arc<dyn Fn(&(dyn std::error::Error + 'static)) -> bool + Send + Sync>;

/// A queue's policy, declared where its handler is registered. Each field is unset
/// unless given. The retry fields fill, field by field, what a task's own retry policy
/// leaves unset when it is submitted through the same client: the spec's own retry
/// wins, then these, then the broker's `[queues.NAME] retry`, then its `[retry]`.
#[derive(Clone, Default)]
pub struct QueuePolicy {
    retry: pb::RetryPolicy,
    non_retryable: Vec<(&'static str, ErrorMatch)>,
    concurrency: Option<usize>,
}

impl QueuePolicy {
    pub fn new() -> Self {
        Self::default()
    }

    /// Total attempts allowed, counting the first.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.retry.max_attempts = n;
        self
    }

    /// Backoff before the second attempt (zero retries at once).
    pub fn backoff(mut self, d: Duration) -> Self {
        self.retry.initial_backoff = Some(to_proto_duration(d));
        self
    }

    /// Factor applied to the backoff after each failure, at least 1.
    pub fn backoff_multiplier(mut self, factor: f64) -> Self {
        self.retry.backoff_multiplier = factor;
        self
    }

    /// Upper bound of the backoff.
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.retry.max_backoff = Some(to_proto_duration(d));
        self
    }

    /// An attempt whose error is an `E` (the error the handler returned, or one of its
    /// sources) fails for good: the worker sends a non-retryable Fail and the task goes
    /// DEAD, whoever submitted it.
    pub fn non_retryable<E: std::error::Error + 'static>(mut self) -> Self {
        self.non_retryable.push((
            std::any::type_name::<E>(),
            Arc::new(|e| e.downcast_ref::<E>().is_some()),
        ));
        self
    }

    /// This queue's own slots in the worker, at least 1: at most `n` of its tasks run
    /// at once, leased by a lease loop of their own instead of the worker's shared slots.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n.max(1));
        self
    }

    pub(crate) fn drop_concurrency(&mut self) {
        self.concurrency = None;
    }

    /// The retry defaults (fields left at their zero value are unset).
    pub fn retry(&self) -> &pb::RetryPolicy {
        &self.retry
    }

    /// The queue's own slots, if given.
    pub fn concurrency_limit(&self) -> Option<usize> {
        self.concurrency
    }

    /// `spec`'s retry with its unset fields taken from this policy.
    pub(crate) fn fill(&self, spec: &mut pb::TaskSpec) {
        spec.retry = merge_retry(spec.retry.take(), &self.retry);
    }

    /// Whether `e` is one of the non-retryable types (or has one among its sources).
    pub fn is_non_retryable(&self, e: &TaskError) -> bool {
        let mut next = e.error();
        while let Some(err) = next {
            if self.non_retryable.iter().any(|(_, m)| m(err)) {
                return true;
            }
            next = err.source();
        }
        false
    }

    /// `e`, made non-retryable when its type says so.
    pub(crate) fn classify(&self, e: TaskError) -> TaskError {
        if e.is_retryable() && self.is_non_retryable(&e) {
            e.into_permanent()
        } else {
            e
        }
    }
}

impl fmt::Debug for QueuePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let types: Vec<&str> = self.non_retryable.iter().map(|(n, _)| *n).collect();
        f.debug_struct("QueuePolicy")
            .field("retry", &self.retry)
            .field("non_retryable", &types)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

/// `handler` with its errors of the policy's non-retryable types made permanent.
pub(crate) fn classified(handler: BoxHandler, policy: QueuePolicy) -> BoxHandler {
    if policy.non_retryable.is_empty() {
        return handler;
    }
    let policy = Arc::new(policy);
    Arc::new(move |ctx| {
        let run = handler(ctx);
        let policy = policy.clone();
        Box::pin(async move { run.await.map_err(|e| policy.classify(e)) })
    })
}

/// `own`'s fields, and `defaults`' where `own` leaves one unset.
pub(crate) fn merge_retry(
    own: Option<pb::RetryPolicy>,
    defaults: &pb::RetryPolicy,
) -> Option<pb::RetryPolicy> {
    if *defaults == pb::RetryPolicy::default() {
        return own;
    }
    let mut r = own.unwrap_or_default();
    if r.max_attempts == 0 {
        r.max_attempts = defaults.max_attempts;
    }
    if r.backoff_multiplier == 0.0 {
        r.backoff_multiplier = defaults.backoff_multiplier;
    }
    if r.initial_backoff.is_none() {
        r.initial_backoff = defaults.initial_backoff;
    }
    if r.max_backoff.is_none() {
        r.max_backoff = defaults.max_backoff;
    }
    if r.jitter.is_none() {
        r.jitter = defaults.jitter;
    }
    Some(r)
}

/// The retry defaults of the queues whose handlers declared them, shared by a client
/// and its clones (the last registration of a queue wins).
#[derive(Debug, Clone, Default)]
pub(crate) struct RetryDefaults(Arc<RwLock<HashMap<String, pb::RetryPolicy>>>);

impl RetryDefaults {
    pub(crate) fn set(&self, queue: &str, retry: &pb::RetryPolicy) {
        let mut table = self.0.write().unwrap_or_else(|p| p.into_inner());
        if *retry == pb::RetryPolicy::default() {
            table.remove(queue);
        } else {
            table.insert(queue.to_string(), retry.clone());
        }
    }

    /// Fills the unset retry fields of each spec from its queue's defaults.
    pub(crate) fn apply(&self, specs: &mut [pb::TaskSpec]) {
        let table = self.0.read().unwrap_or_else(|p| p.into_inner());
        if table.is_empty() {
            return;
        }
        for spec in specs {
            if let Some(d) = table.get(&spec.queue) {
                spec.retry = merge_retry(spec.retry.take(), d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Invalid;
    impl fmt::Display for Invalid {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("invalid address")
        }
    }
    impl std::error::Error for Invalid {}

    #[derive(Debug)]
    struct Wrapped(Invalid);
    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("send failed")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn only_the_unset_fields_are_filled() {
        let p = QueuePolicy::new()
            .max_attempts(7)
            .backoff(Duration::from_secs(2))
            .backoff_multiplier(3.0);
        let own = pb::RetryPolicy {
            max_attempts: 2,
            ..Default::default()
        };
        let got = merge_retry(Some(own), p.retry()).unwrap();
        assert_eq!(got.max_attempts, 2, "the spec's own field wins");
        assert_eq!(
            got.initial_backoff,
            Some(to_proto_duration(Duration::from_secs(2)))
        );
        assert_eq!(got.backoff_multiplier, 3.0);
        assert_eq!(got.max_backoff, None, "unset on both: the broker decides");
        assert_eq!(merge_retry(None, p.retry()).unwrap().max_attempts, 7);
        assert_eq!(merge_retry(None, &pb::RetryPolicy::default()), None);
    }

    #[test]
    fn the_table_fills_only_its_queue() {
        let t = RetryDefaults::default();
        t.set("emails", QueuePolicy::new().max_attempts(5).retry());
        let mut specs = vec![
            crate::TaskSpec::new("emails", "a").into_proto(),
            crate::TaskSpec::new("other", "b").into_proto(),
        ];
        t.apply(&mut specs);
        assert_eq!(specs[0].retry.as_ref().unwrap().max_attempts, 5);
        assert_eq!(specs[1].retry, None);
    }

    #[test]
    fn a_listed_type_or_one_among_the_sources_is_not_retried() {
        let p = QueuePolicy::new().non_retryable::<Invalid>();
        assert!(!p.classify(TaskError::retry(Invalid)).is_retryable());
        assert!(!p.classify(TaskError::from(Wrapped(Invalid))).is_retryable());
        let other = p.classify(TaskError::retry("timeout"));
        assert!(other.is_retryable());
        assert_eq!(other.message(), "timeout");
    }
}
