//! Lease: hand out up to `max_tasks` ready tasks, long-polling up to `wait`.
//!
//! The wait never polls the database on a timer: it sleeps on the queues' Notify
//! handles and wakes on a new pending task, at the earliest future `run_at` of a
//! scheduled task in those queues, when the wait runs out, or when the broker drains.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::select_all;
use tokio::time::Instant;

use super::{Broker, ServiceError};
use crate::domain::reply;
use crate::domain::validate::{self, Invalid};
use crate::store::{LeaseParams, TaskRecord};

#[derive(Debug, Clone, Default)]
pub struct LeaseRequest {
    pub worker_id: String,
    pub queues: Vec<String>,
    pub max_tasks: u32,
    pub lease_duration: Option<Duration>,
    pub wait: Option<Duration>,
    /// The peer address as the transport saw it.
    pub worker_address: String,
    /// What is left of the call's own gRPC deadline, if it has one.
    pub call_timeout: Option<Duration>,
    /// What this worker is (routing).
    pub labels: std::collections::BTreeMap<String, String>,
}

const MAX_QUEUES: usize = 64;
const MAX_WORKER_ID_LEN: usize = 256;

/// A LeaseRequest that passed its checks: the lease and the wait it gets, and
/// the bytes its tasks may take in the reply.
#[derive(Debug, Clone, Copy)]
pub struct LeasePlan {
    lease_duration: Duration,
    wait: Duration,
    max_reply_bytes: u64,
}

/// When a bucket of `limit` that held `tokens` (under one) at `at` has its
/// next token.
fn token_due(
    limit: &crate::domain::admission::RateLimit,
    tokens: f64,
    at: DateTime<Utc>,
) -> DateTime<Utc> {
    let ms = limit.next_token_ms(tokens, at.timestamp_millis());
    DateTime::from_timestamp_millis(ms).unwrap_or(at)
}

/// How long a long-poll sleeps, the clock reading `now`, to look again when a
/// token is `due`: the rest of the wait (none when it is due already). Counted
/// from the look's time, not from the end of the statements that followed it,
/// which would make every look that much late.
fn until_due(due: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (due - now).to_std().unwrap_or_default()
}

/// What a reply keeps of `limits.max_lease_reply_bytes` beyond its tasks'
/// bounds (which count their own tags and lengths): a margin for the framing.
const REPLY_MARGIN_BYTES: u64 = 64;

impl LeasePlan {
    /// Keeps `bytes` of the reply for what a settle answers beside its
    /// next tasks.
    pub(crate) fn reserve(&mut self, bytes: u64) {
        self.max_reply_bytes = self.max_reply_bytes.saturating_sub(bytes);
    }
}

impl Broker {
    /// When the next token is due of the rate-limited queues among `queues`
    /// whose buckets were empty at `now`, the time of the look that found
    /// nothing (`None`: no such queue). A bucket of burst 1 keeps its schedule
    /// for less than one token's interval only, so a long-poll looks when the
    /// token is due, not a recheck period later.
    async fn next_token(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, ServiceError> {
        let mut due: Option<DateTime<Utc>> = None;
        for q in queues {
            let limited = self
                .settings
                .queue(q)
                .is_some_and(|l| l.config.rate_limit.is_some());
            if !limited {
                continue;
            }
            let usage = self.store.queue_usage(q, None, now).await?;
            if let (Some(limit), Some(tokens)) = (usage.config.rate_limit, usage.tokens)
                && crate::domain::admission::whole_tokens(tokens) < 1.0
            {
                let at = token_due(&limit, tokens, now);
                due = Some(due.map_or(at, |d| d.min(at)));
            }
        }
        Ok(due)
    }

    pub async fn lease(&self, req: LeaseRequest) -> Result<Vec<TaskRecord>, ServiceError> {
        let plan = self.lease_plan(&req)?;
        self.lease_planned(req, plan).await
    }

    /// Checks a LeaseRequest (changing nothing) and works out its lease and wait.
    pub(crate) fn lease_plan(&self, req: &LeaseRequest) -> Result<LeasePlan, Invalid> {
        let limits = &self.settings.limits;
        validate::identifier("worker_id", &req.worker_id, MAX_WORKER_ID_LEN)?;
        if req.queues.is_empty() || req.queues.len() > MAX_QUEUES {
            return Err(Invalid::new(
                "queues",
                format!("must name 1 to {MAX_QUEUES} queues"),
            ));
        }
        for (i, q) in req.queues.iter().enumerate() {
            validate::queue_name(&format!("queues[{i}]"), q)?;
        }
        crate::domain::routing::labels("labels", &req.labels)?;
        if req.max_tasks == 0 || req.max_tasks > limits.max_lease_batch {
            return Err(Invalid::new(
                "max_tasks",
                format!("must be between 1 and {}", limits.max_lease_batch),
            ));
        }
        // The queues' own bounds ([queues.X] min_lease / max_lease) narrow the
        // broker's; the default lease is brought inside them.
        let (min_lease, max_lease) = self.settings.lease_bounds(&req.queues);
        if min_lease > max_lease {
            return Err(Invalid::new(
                "queues",
                "name queues whose lease bounds (min_lease, max_lease) do not overlap",
            ));
        }
        let lease_duration = req.lease_duration.unwrap_or_else(|| {
            self.settings
                .default_lease_for(&req.queues)
                .clamp(min_lease, max_lease)
        });
        validate::duration_in("lease_duration", lease_duration, min_lease, max_lease)?;
        let wait = req.wait.unwrap_or_default();
        validate::duration_in("wait", wait, Duration::ZERO, limits.max_wait)?;
        // Answer (empty) a little before the caller's own deadline, so it gets OK.
        let wait = match req.call_timeout {
            Some(t) => wait.min(t.saturating_sub((t / 10).min(Duration::from_millis(500)))),
            None => wait,
        };
        Ok(LeasePlan {
            lease_duration,
            wait,
            max_reply_bytes: (limits.max_lease_reply_bytes as u64)
                .saturating_sub(REPLY_MARGIN_BYTES),
        })
    }

    /// Leases for a request `lease_plan` accepted.
    pub(crate) async fn lease_planned(
        &self,
        req: LeaseRequest,
        plan: LeasePlan,
    ) -> Result<Vec<TaskRecord>, ServiceError> {
        let LeasePlan {
            lease_duration,
            wait,
            max_reply_bytes,
        } = plan;
        if self.dispatch.draining().is_cancelled() {
            return Ok(Vec::new());
        }

        // Routing: the worker registry (throttled).
        self.worker_seen(
            &req.worker_id,
            Some(&req.labels),
            &req.worker_address,
            &req.queues,
        )
        .await;
        let routing = crate::store::LeaseRouting {
            labels: req.labels.clone(),
            max_leases_per_worker: self.settings.worker_caps(&req.queues),
        };

        let give_up = Instant::now() + wait;
        let handles = self.dispatch.handles(&req.queues);
        // Long-polls of the same queues share their store calls.
        let mut key = req.queues.clone();
        key.sort_unstable();
        key.dedup();
        // Set while this long-poll holds a wake-up it has not used yet.
        let mut pass_on = None;
        loop {
            // Register interest before looking, so a wake between the look and the
            // wait is not lost.
            let mut woken: Vec<Pin<Box<tokio::sync::futures::Notified<'_>>>> =
                handles.iter().map(|n| Box::pin(n.notified())).collect();
            woken.push(Box::pin(self.dispatch.all().notified()));
            for w in woken.iter_mut() {
                w.as_mut().enable();
            }
            let now = self.clock.now();
            let params = LeaseParams {
                // Each queue once: requests for the same set share one statement.
                queues: key.clone(),
                max_tasks: req.max_tasks,
                max_reply_bytes,
                worker_id: req.worker_id.clone(),
                worker_address: req.worker_address.clone(),
                lease_duration,
                now,
                routing: routing.clone(),
            };
            let weight = params.max_tasks as usize;
            let store = self.store.clone();
            // Admission: queues with gates take the gated lease.
            let gated = self.settings.gated(&key);
            let tasks = self
                .leases
                .call(key.clone(), params, weight, move |ps: Vec<LeaseParams>| {
                    let store = store.clone();
                    async move {
                        if gated {
                            store.task_lease_gated(&ps).await
                        } else {
                            store.task_lease_many(&ps).await
                        }
                    }
                })
                .await?;
            if let Some(p) = pass_on.take() {
                crate::dispatch::PassOn::done(p);
            }
            self.pending_leased(&tasks);
            for t in &tasks {
                let waited = (now - t.run_at.max(t.created_at))
                    .to_std()
                    .unwrap_or_default();
                let path = crate::domain::explain::lease_path(&t.routing, gated);
                self.metrics.leased(&t.queue, path, waited);
            }
            if tasks.len() == req.max_tasks as usize {
                // A full batch: more may be waiting, so pass the wake-up on.
                for q in &req.queues {
                    self.dispatch.wake(Some(q));
                }
            }
            if !tasks.is_empty() || Instant::now() >= give_up {
                return Ok(self.with_dependency_results(tasks, max_reply_bytes).await);
            }
            let mut until = give_up;
            // Every waiter that found nothing asks this at once: one query answers all
            // (at the earliest `now` among them, so none misses a task due for it).
            let store = self.store.clone();
            let queues = key.clone();
            let next_run = self
                .next_runs
                .call(key.clone(), now, 1, move |nows: Vec<DateTime<Utc>>| {
                    let (store, queues) = (store.clone(), queues.clone());
                    async move {
                        let Some(earliest) = nows.iter().min().copied() else {
                            return Ok(Vec::new());
                        };
                        let next = store.task_next_run_at(&queues, earliest).await?;
                        Ok(vec![next; nows.len()])
                    }
                })
                .await?;
            if let Some(next) = next_run {
                let due = (next - now).to_std().unwrap_or_default();
                until = until.min(Instant::now() + due);
            }
            if gated {
                // A gate opens without a wake-up when a lease ends on another
                // replica or a rate-limit token comes due: look again soon, and
                // when a queue's next token is due, right then.
                let mut recheck = self.settings.gated_recheck(&key);
                if let Some(due) = self.next_token(&key, now).await? {
                    // The look and this read took some of the wait already.
                    recheck = recheck.min(until_due(due, self.clock.now()));
                }
                until = until.min(Instant::now() + recheck);
            }
            let _waiting = self.dispatch.waiting();
            // Sync match: a long-poll of one plain queue waits where a
            // Submit can hand it tasks directly.
            let mut parking =
                (key.len() == 1 && !gated && self.queue_matchable(&key[0])).then(|| {
                    self.park(
                        &key[0],
                        super::sync_match::Offer {
                            to: crate::store::MatchTo {
                                worker_id: req.worker_id.clone(),
                                worker_address: req.worker_address.clone(),
                                lease_duration,
                            },
                            max_tasks: req.max_tasks,
                            max_reply_bytes,
                        },
                    )
                });
            let handed = async {
                match parking.as_mut() {
                    Some(p) => p.answer().await,
                    None => std::future::pending().await,
                }
            };
            let mut drained = false;
            let mut tasks = tokio::select! {
                _ = select_all(woken) => {
                    pass_on = Some(self.dispatch.pass_on(&key));
                    Vec::new()
                }
                tasks = handed => tasks,
                _ = tokio::time::sleep_until(until) => Vec::new(),
                _ = self.dispatch.draining().cancelled() => {
                    drained = true;
                    Vec::new()
                }
            };
            if let Some(p) = parking {
                // Claimed by a Submit meanwhile: its tasks are leased to this
                // caller already, so they are waited for.
                tasks.extend(p.leave().await);
            }
            if !tasks.is_empty() {
                self.pending_leased(&tasks);
                let now = self.clock.now();
                for t in &tasks {
                    let waited = (now - t.run_at.max(t.created_at))
                        .to_std()
                        .unwrap_or_default();
                    let path = crate::domain::explain::LeasePath::Matched;
                    self.metrics.leased(&t.queue, path, waited);
                    self.metrics.sync_matched(&t.queue);
                }
                return Ok(self.with_dependency_results(tasks, max_reply_bytes).await);
            }
            if drained {
                return Ok(Vec::new());
            }
        }
    }
}

impl Broker {
    /// Fills the results of the SUCCEEDED dependencies of the leased tasks that
    /// were submitted with dependencies (a reply with no such task reads
    /// nothing). They share the lease reply budget with the tasks: in lease
    /// order, a task's results go in whole while the reply stays within it, and
    /// are left out whole otherwise (the task is leased all the same; GetTask of
    /// each dependency reads its result). Their sizes are read first, then only
    /// the results that fit, so a lease never reads more than its budget. A
    /// failed read leaves them out too, as the tasks are leased already.
    async fn with_dependency_results(
        &self,
        mut tasks: Vec<TaskRecord>,
        budget: u64,
    ) -> Vec<TaskRecord> {
        let ids: Vec<String> = tasks
            .iter()
            .filter(|t| crate::domain::task::has_dependencies(&t.metadata))
            .map(|t| t.id.clone())
            .collect();
        if ids.is_empty() {
            return tasks;
        }
        let read = async {
            let sizes: std::collections::HashMap<String, u64> = self
                .store
                .task_dependency_result_sizes(&ids)
                .await?
                .into_iter()
                .map(|(id, n, bytes)| (id, reply::dependency_results_bytes(n, bytes)))
                .collect();
            let mut used: u64 = tasks.iter().map(reply::record_bytes).sum();
            let mut fit = Vec::new();
            for t in &tasks {
                let Some(&size) = sizes.get(&t.id) else {
                    continue;
                };
                if used.saturating_add(size) <= budget {
                    used += size;
                    fit.push(t.id.clone());
                } else {
                    tracing::debug!(task_id = %t.id, bytes = size,
                        "dependency results left out of the lease reply: over its size budget");
                }
            }
            if fit.is_empty() {
                return Ok(Vec::new());
            }
            self.store.task_dependency_results(&fit).await
        };
        let rows = match read.await {
            Ok(rows) => rows,
            Err(e) => {
                let e = ServiceError::from(e);
                tracing::warn!(error = %e, cause = ?std::error::Error::source(&e),
                    "reading dependency results failed; the leased tasks go without them");
                return tasks;
            }
        };
        let mut by_task: std::collections::HashMap<String, BTreeMap<String, Vec<u8>>> =
            std::collections::HashMap::new();
        for (task, dep, result) in rows {
            by_task.entry(task).or_default().insert(dep, result);
        }
        for t in &mut tasks {
            if let Some(results) = by_task.remove(&t.id) {
                t.dependency_results = results;
            }
        }
        tasks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::admission::RateLimit;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    #[test]
    fn a_long_poll_wakes_when_the_token_is_due_not_a_whole_interval_after_its_reads() {
        let limit = RateLimit {
            per_second: 50.0,
            burst: 1,
        };
        // The look at 1,000 found an empty bucket: the token is due at 1,020.
        let due = token_due(&limit, 0.0, at(1_000));
        assert_eq!(due, at(1_020));
        // Its statements ended at 1,007: it sleeps 13 ms.
        assert_eq!(until_due(due, at(1_007)), Duration::from_millis(13));
        // A quarter token held: due 15 ms after the look.
        assert_eq!(token_due(&limit, 0.25, at(1_000)), at(1_015));
        // Reads that outlast the wait: it looks again at once.
        assert_eq!(until_due(due, at(1_031)), Duration::ZERO);
    }
}
