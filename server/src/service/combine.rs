//! Group commit above the store: concurrent calls of the same kind (and key) are
//! served by one store call.
//!
//! Each key has at most `in_flight` store calls running in this broker (one,
//! unless the store's writes keep each other apart by row locks: see
//! `Capabilities::parallel_writes`); requests that arrive while they all run wait
//! and go together into the next one. So under load a store call carries the work
//! of every caller that waited (one statement, one commit), and when a driver is
//! free a request runs at once. On Postgres this is what
//! turns many one-row statements, each with its own plan, commit and pooled
//! connection, into few multi-row ones; it also stops concurrent lease statements
//! from racing over the head of the same index. On SQLite the writer batches
//! commits already; this still turns many writer jobs into one.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::FutureExt;

use tokio::sync::oneshot;

use crate::store::{BoxError, StoreError, StoreResult};

pub(super) struct Combiner<K, I, O> {
    groups: Mutex<HashMap<K, Group<I, O>>>,
    /// Requests per store call at most.
    max_requests: usize,
    /// Total weight (tasks) per store call at most; a request is never split.
    max_weight: usize,
    /// Store calls of one key running at once at most.
    in_flight: usize,
}

struct Group<I, O> {
    /// Drivers serving this key now (at most `in_flight`).
    running: usize,
    waiting: Vec<Waiter<I, O>>,
}

impl<I, O> Default for Group<I, O> {
    fn default() -> Self {
        Group {
            running: 0,
            waiting: Vec::new(),
        }
    }
}

struct Waiter<I, O> {
    input: I,
    weight: usize,
    reply: oneshot::Sender<StoreResult<O>>,
}

impl<K, I, O> Combiner<K, I, O>
where
    K: Hash + Eq + Clone + Send + 'static,
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    pub(super) fn new(max_requests: usize, max_weight: usize) -> Self {
        Self::with_in_flight(max_requests, max_weight, 1)
    }

    /// A combiner that runs up to `in_flight` store calls of one key at once.
    pub(super) fn with_in_flight(max_requests: usize, max_weight: usize, in_flight: usize) -> Self {
        Combiner {
            groups: Mutex::new(HashMap::new()),
            max_requests: max_requests.max(1),
            max_weight,
            in_flight: in_flight.max(1),
        }
    }

    /// Queues `input` under `key` and returns its answer. `run` serves a batch of
    /// inputs with one answer per input, in order; it is used if this call starts
    /// the key's driver.
    pub(super) async fn call<F, Fut>(
        self: &Arc<Self>,
        key: K,
        input: I,
        weight: usize,
        run: F,
    ) -> StoreResult<O>
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = StoreResult<Vec<O>>> + Send,
    {
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            let group = groups.entry(key.clone()).or_default();
            group.waiting.push(Waiter {
                input,
                weight,
                reply,
            });
            let start = group.running < self.in_flight;
            group.running += usize::from(start);
            start
        };
        if start {
            let this = self.clone();
            tokio::spawn(async move { this.drive(key, run).await });
        }
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the request was not answered".into()))?
    }

    /// Runs store calls for `key` until nobody waits (one of the key's drivers).
    async fn drive<F, Fut>(&self, key: K, run: F)
    where
        F: Fn(Vec<I>) -> Fut,
        Fut: Future<Output = StoreResult<Vec<O>>>,
    {
        loop {
            let batch = {
                let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
                let Some(group) = groups.get_mut(&key) else {
                    return;
                };
                // Callers that went away (cancelled calls) are not served.
                group.waiting.retain(|w| !w.reply.is_closed());
                if group.waiting.is_empty() {
                    group.running -= 1;
                    if group.running == 0 {
                        groups.remove(&key);
                    }
                    return;
                }
                self.take_batch(&mut group.waiting)
            };
            let (inputs, replies): (Vec<I>, Vec<_>) =
                batch.into_iter().map(|w| (w.input, w.reply)).unzip();
            let asked = inputs.len();
            // Kept to serve each request alone if the combined call fails on data.
            let alone = (asked > 1).then(|| inputs.clone());
            match Self::run_caught(&run, inputs).await {
                Ok(answers) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        // A caller gone since loses its answer, as it would have
                        // had its own call finished after it left.
                        let _ = reply.send(Ok(answer));
                    }
                }
                // One request's bad data fails the whole statement: serve each
                // request alone, so the error reaches only the caller that caused
                // it. (A rolled-back store call changed nothing, so it may run again.)
                Err(e) if !matches!(e, StoreError::Unavailable(_)) && alone.is_some() => {
                    tracing::warn!(error = %e, requests = asked, "combined call failed; serving each request alone");
                    for (input, reply) in alone.into_iter().flatten().zip(replies) {
                        let answer = Self::run_caught(&run, vec![input])
                            .await
                            .and_then(|mut one| one.pop().ok_or_else(|| lost_answers(1, 0)));
                        let _ = reply.send(answer);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, requests = asked, "combined call failed");
                    for reply in replies {
                        let _ = reply.send(Err(same_error(&e)));
                    }
                }
            }
        }
    }

    /// One store call: a panic becomes an error (the driver carries on, so the key
    /// is never left marked as running with nobody to serve it), and so does an
    /// answer count that does not match the requests.
    async fn run_caught<F, Fut>(run: &F, inputs: Vec<I>) -> StoreResult<Vec<O>>
    where
        F: Fn(Vec<I>) -> Fut,
        Fut: Future<Output = StoreResult<Vec<O>>>,
    {
        let asked = inputs.len();
        let answered = AssertUnwindSafe(run(inputs)).catch_unwind().await;
        let answers = answered.unwrap_or_else(|_| {
            tracing::error!(requests = asked, "a combined store call panicked");
            Err(StoreError::Internal("the store call panicked".into()))
        })?;
        if answers.len() != asked {
            tracing::error!(asked, got = answers.len(), "a combined call lost answers");
            return Err(lost_answers(asked, answers.len()));
        }
        Ok(answers)
    }

    /// The first waiters, within the limits (always at least one).
    fn take_batch(&self, waiting: &mut Vec<Waiter<I, O>>) -> Vec<Waiter<I, O>> {
        let mut weight = 0;
        let mut n = 0;
        for w in waiting.iter() {
            if n > 0 && (n == self.max_requests || weight + w.weight > self.max_weight) {
                break;
            }
            weight += w.weight;
            n += 1;
        }
        waiting.drain(..n).collect()
    }
}

fn lost_answers(asked: usize, got: usize) -> StoreError {
    StoreError::Corrupt(format!("{got} answers for {asked} requests"))
}

/// The same failure, for each caller of a failed combined call.
fn same_error(e: &StoreError) -> StoreError {
    let detail = || -> BoxError {
        match std::error::Error::source(e) {
            Some(source) => source.to_string().into(),
            None => e.to_string().into(),
        }
    };
    match e {
        StoreError::Unavailable(_) => StoreError::Unavailable(detail()),
        StoreError::Corrupt(s) => StoreError::Corrupt(s.clone()),
        StoreError::Internal(_) | StoreError::Migrate(_) | StoreError::Config(_) => {
            StoreError::Internal(detail())
        }
    }
}

/// Splits `all` into consecutive runs of the given lengths.
pub(super) fn split<T>(all: Vec<T>, lengths: &[usize]) -> StoreResult<Vec<Vec<T>>> {
    if all.len() != lengths.iter().sum::<usize>() {
        return Err(StoreError::Corrupt(format!(
            "{} answers for {} requests",
            all.len(),
            lengths.iter().sum::<usize>()
        )));
    }
    let mut rest = all.into_iter();
    Ok(lengths
        .iter()
        .map(|&n| rest.by_ref().take(n).collect())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_order_and_checks_the_total() {
        let parts = split(vec![1, 2, 3, 4], &[1, 0, 3]).unwrap();
        assert_eq!(parts, vec![vec![1], vec![], vec![2, 3, 4]]);
        assert!(split(vec![1, 2], &[3]).is_err());
    }

    #[tokio::test]
    async fn waiting_calls_share_one_store_call() {
        let combiner: Arc<Combiner<(), u32, u32>> = Arc::new(Combiner::new(100, 1000));
        let (release, hold) = tokio::sync::watch::channel(false);
        let calls = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let run = {
            let calls = calls.clone();
            move |inputs: Vec<u32>| {
                let (calls, mut hold) = (calls.clone(), hold.clone());
                async move {
                    calls.lock().unwrap().push(inputs.clone());
                    // The first call stays open until released, so the others queue.
                    let _ = hold.wait_for(|&open| open).await;
                    Ok(inputs.iter().map(|i| i * 10).collect())
                }
            }
        };
        let first = tokio::spawn({
            let (c, run) = (combiner.clone(), run.clone());
            async move { c.call((), 1, 1, run).await }
        });
        // Wait until the first call is inside the store call.
        while calls.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let rest: Vec<_> = (2..=4)
            .map(|i| {
                let (c, run) = (combiner.clone(), run.clone());
                tokio::spawn(async move { c.call((), i, 1, run).await })
            })
            .collect();
        // All three are queued before the first call returns.
        loop {
            let queued = combiner.groups.lock().unwrap()[&()].waiting.len();
            if queued == 3 {
                break;
            }
            tokio::task::yield_now().await;
        }
        release.send(true).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), 10);
        for (i, h) in (2..=4).zip(rest) {
            assert_eq!(h.await.unwrap().unwrap(), i * 10);
        }
        assert_eq!(*calls.lock().unwrap(), vec![vec![1], vec![2, 3, 4]]);
    }

    #[tokio::test]
    async fn in_flight_calls_run_at_once_and_the_rest_wait_together() {
        let combiner: Arc<Combiner<(), u32, u32>> =
            Arc::new(Combiner::with_in_flight(100, 1000, 2));
        let (release, hold) = tokio::sync::watch::channel(false);
        let calls = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        let run = {
            let calls = calls.clone();
            move |inputs: Vec<u32>| {
                let (calls, mut hold) = (calls.clone(), hold.clone());
                async move {
                    calls.lock().unwrap().push(inputs.clone());
                    let _ = hold.wait_for(|&open| open).await;
                    Ok(inputs.iter().map(|i| i * 10).collect())
                }
            }
        };
        let spawn = |i: u32| {
            let (c, run) = (combiner.clone(), run.clone());
            tokio::spawn(async move { c.call((), i, 1, run).await })
        };
        let first = spawn(1);
        while calls.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        // The second starts a driver of its own while the first call runs.
        let second = spawn(2);
        while calls.lock().unwrap().len() < 2 {
            tokio::task::yield_now().await;
        }
        let rest: Vec<_> = (3..=5).map(spawn).collect();
        while combiner.groups.lock().unwrap()[&()].waiting.len() < 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            calls.lock().unwrap().len(),
            2,
            "no third call while two run"
        );
        release.send(true).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), 10);
        assert_eq!(second.await.unwrap().unwrap(), 20);
        for (i, h) in (3..=5).zip(rest) {
            assert_eq!(h.await.unwrap().unwrap(), i * 10);
        }
        let calls = calls.lock().unwrap().clone();
        // The waiting three went together into the call of whichever driver was free.
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert_eq!(calls[2], vec![3, 4, 5]);
        // Both drivers end once nobody waits, and the key is gone.
        while !combiner.groups.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_panicking_store_call_fails_its_callers_and_not_the_next() {
        let combiner: Arc<Combiner<(), u32, u32>> = Arc::new(Combiner::new(100, 1000));
        let run = |inputs: Vec<u32>| async move {
            assert!(inputs[0] != 0, "store bug");
            Ok(inputs)
        };
        let e = combiner.call((), 0, 1, run).await.unwrap_err();
        assert!(matches!(e, StoreError::Internal(_)));
        assert_eq!(combiner.call((), 7, 1, run).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_data_error_fails_only_the_request_that_caused_it() {
        let combiner: Arc<Combiner<(), u32, u32>> = Arc::new(Combiner::new(100, 1000));
        let (release, hold) = tokio::sync::watch::channel(false);
        let calls = Arc::new(Mutex::new(Vec::<Vec<u32>>::new()));
        // Input 0 is data the store refuses; it fails any statement it is part of.
        let run = {
            let calls = calls.clone();
            move |inputs: Vec<u32>| {
                let (calls, mut hold) = (calls.clone(), hold.clone());
                async move {
                    calls.lock().unwrap().push(inputs.clone());
                    let _ = hold.wait_for(|&open| open).await;
                    if inputs.contains(&0) {
                        return Err(StoreError::Internal("invalid byte sequence".into()));
                    }
                    Ok(inputs.iter().map(|i| i * 10).collect())
                }
            }
        };
        let first = tokio::spawn({
            let (c, run) = (combiner.clone(), run.clone());
            async move { c.call((), 5, 1, run).await }
        });
        while calls.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let rest: Vec<_> = [1, 0, 2]
            .into_iter()
            .map(|i| {
                let (c, run) = (combiner.clone(), run.clone());
                tokio::spawn(async move { c.call((), i, 1, run).await })
            })
            .collect();
        while combiner.groups.lock().unwrap()[&()].waiting.len() < 3 {
            tokio::task::yield_now().await;
        }
        release.send(true).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), 50);
        let answers: Vec<_> = futures::future::join_all(rest).await;
        assert_eq!(answers[0].as_ref().unwrap().as_ref().unwrap(), &10);
        assert!(matches!(
            answers[1].as_ref().unwrap(),
            Err(StoreError::Internal(_))
        ));
        assert_eq!(answers[2].as_ref().unwrap().as_ref().unwrap(), &20);
        // The combined call, then each request alone.
        assert_eq!(
            *calls.lock().unwrap(),
            vec![vec![5], vec![1, 0, 2], vec![1], vec![0], vec![2]]
        );
    }

    #[tokio::test]
    async fn a_failed_call_fails_each_caller_alike() {
        let combiner: Arc<Combiner<(), u32, u32>> = Arc::new(Combiner::new(100, 1000));
        let run = |_: Vec<u32>| async { Err(StoreError::Unavailable("down".into())) };
        let e = combiner.call((), 1, 1, run).await.unwrap_err();
        assert!(matches!(e, StoreError::Unavailable(_)));
        assert_eq!(std::error::Error::source(&e).unwrap().to_string(), "down");
    }
}
