//! Sync match: a Submit hands its tasks straight to the long-polls
//! waiting for their queue on this replica. The tasks are inserted already
//! leased to those waiters (`Store::task_insert_matched`: one statement, one
//! commit), and the producer and the workers are answered together.
//!
//! Who takes part, kept simple so every lease rule holds unchanged:
//! - a long-poll over exactly one queue, with no admission gates and no
//!   per-worker cap, parks while it waits (`dispatch::parking`);
//! - a task with no routing (target, sticky policy, fan-out), due now, in such
//!   a queue, is matched; per queue the batch's tasks are matched in lease order
//!   and matching stops at the first that cannot be, and the store leases none
//!   while a pending task of the queue due now would lease first.
//!
//! A claimed long-poll always waits for its answer (the tasks, or nothing: then
//! it looks again). If it went away meanwhile (its call was cancelled), the
//! tasks leased to it are released at once (`Store::lease_release`), so they are
//! pending again; if even that fails, their lease expires and the reaper
//! reclaims them, as for any lease whose holder vanished.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::Clock;
use crate::dispatch::Dispatcher;
pub(super) use crate::dispatch::parking::{Claimed, GiveBack, Offer, Parked, Parking};
use crate::store::sync_match::lease_order;
use crate::store::{
    Inserted, LeaseRef, MatchTo, NewTask, Store, StoreResult, TaskRecord, lease_slots,
};

/// What a parked long-poll needs to give back tasks it can no longer answer with.
#[derive(Clone)]
pub(super) struct Releaser {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub dispatch: Arc<Dispatcher>,
}

impl GiveBack for Releaser {
    /// Makes the tasks pending again now, in the background (a caller that went
    /// away cannot wait for it). If the release fails, the leases expire.
    fn give_back(&self, tasks: Vec<TaskRecord>) {
        if tasks.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move { this.release_now(&tasks).await });
    }
}

impl Releaser {
    async fn release_now(&self, tasks: &[TaskRecord]) {
        let refs: Vec<LeaseRef> = tasks
            .iter()
            .map(|t| LeaseRef {
                task_id: t.id.clone(),
                lease_token: t.lease_token.clone().unwrap_or_default(),
            })
            .collect();
        match self.store.lease_release(&refs, self.clock.now()).await {
            Ok(n) => {
                tracing::debug!(released = n, "sync-matched tasks given back");
                for t in tasks {
                    self.dispatch.wake(Some(&t.queue));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, tasks = tasks.len(), "could not give back sync-matched tasks; their leases will expire")
            }
        }
    }
}

/// One Submit call's tasks, whether each may be sync-matched (its queue has no
/// gates and no per-worker cap, its routing none), and its time of arrival.
/// One Submit call's tasks, which of them may go to a waiter, its `now`, and
/// the instant after which it must not commit.
pub(super) type SubmitBatch = (
    Vec<NewTask>,
    Vec<bool>,
    DateTime<Utc>,
    Option<std::time::Instant>,
);

/// One submitted task: what was inserted, and whether it went to a waiter.
pub(super) type Submitted = (Inserted, bool);

/// Inserts the combined Submit calls: with matches when long-polls of their
/// queues are parked, else as plain inserts. One answer per call: per task, what
/// was inserted and whether it went to a waiter.
pub(super) async fn insert_batch(
    parked: &Parked,
    release: &Releaser,
    batch: Vec<SubmitBatch>,
) -> StoreResult<Vec<Vec<Submitted>>> {
    let now = batch.iter().map(|b| b.2).max().unwrap_or_default();
    // A call whose commit-by instant passed while it waited for its batch is
    // left out (its answer is empty: the caller says DEADLINE_EXCEEDED).
    let started = std::time::Instant::now();
    let batch: Vec<SubmitBatch> = batch
        .into_iter()
        .map(|mut b| {
            if b.3.is_some_and(|d| started >= d) {
                b.0.clear();
                b.1.clear();
            }
            b
        })
        .collect();
    let lengths: Vec<usize> = batch.iter().map(|b| b.0.len()).collect();
    let mut tasks = Vec::with_capacity(lengths.iter().sum());
    let mut eligible = Vec::with_capacity(tasks.capacity());
    for (t, e, _, _) in batch {
        tasks.extend(t);
        eligible.extend(e);
    }
    if tasks.is_empty() {
        return Ok(lengths.iter().map(|_| Vec::new()).collect());
    }
    let draining = release.dispatch.draining().is_cancelled();
    let plan = if parked.any() && !draining {
        plan(parked, &tasks, &eligible, now)
    } else {
        Plan::default()
    };
    let answers: Vec<(Inserted, bool)> = if plan.claimed.is_empty() {
        let inserted = release.store.task_insert_many(&tasks, now).await?;
        inserted.into_iter().map(|i| (i, false)).collect()
    } else {
        // On an error the claimed waiters' channels close: they look again.
        let inserted = release
            .store
            .task_insert_matched(&tasks, &plan.matches, now)
            .await?;
        let mut given: Vec<Vec<TaskRecord>> = plan.claimed.iter().map(|_| Vec::new()).collect();
        let mut answers = Vec::with_capacity(inserted.len());
        for (i, m) in inserted.into_iter().enumerate() {
            let leased = m.leased.is_some();
            if let (Some(record), Some(w)) = (m.leased, plan.owner[i]) {
                given[w].push(record);
            }
            answers.push((m.inserted, leased));
        }
        deliver(parked, release, plan.claimed, given).await;
        answers
    };
    super::combine::split(answers, &lengths)
}

/// Hands each claimed waiter its tasks (possibly none), in lease order; gives
/// back at once the tasks of a waiter that went away before its answer.
async fn deliver(
    parked: &Parked,
    release: &Releaser,
    claimed: Vec<Claimed>,
    given: Vec<Vec<TaskRecord>>,
) {
    for (claimed, mut tasks) in claimed.into_iter().zip(given) {
        crate::store::row::sort_lease_order(&mut tasks);
        parked.count_handed(tasks.len());
        if let Err(unanswered) = claimed.answer.send(tasks) {
            release.release_now(&unanswered).await;
        }
    }
}

#[derive(Default)]
struct Plan {
    claimed: Vec<Claimed>,
    /// Per task, the waiter it is offered to.
    matches: Vec<Option<MatchTo>>,
    /// Per task, the index in `claimed` of that waiter.
    owner: Vec<Option<usize>>,
}

/// Per queue, the head of the batch's tasks in lease order that may be matched,
/// handed out to that many parked waiters of the queue at most (one slot of each
/// waiter before a second of any, as leases served together share tasks), within
/// each waiter's max_tasks and reply budget. Matching stops in a queue at the
/// first task that cannot be matched.
fn plan(parked: &Parked, tasks: &[NewTask], eligible: &[bool], now: DateTime<Utc>) -> Plan {
    let mut heads: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut closed: Vec<&str> = Vec::new();
    for i in lease_order(tasks, now) {
        let q = tasks[i].queue.as_str();
        if closed.contains(&q) {
            continue;
        }
        if !eligible.get(i).copied().unwrap_or(false) {
            closed.push(q);
            continue;
        }
        match heads.iter_mut().find(|(h, _)| *h == q) {
            Some((_, v)) => v.push(i),
            None => heads.push((q, vec![i])),
        }
    }
    let mut plan = Plan {
        claimed: Vec::new(),
        matches: vec![None; tasks.len()],
        owner: vec![None; tasks.len()],
    };
    for (q, head) in heads {
        let claimed = parked.claim(q, head.len());
        if claimed.is_empty() {
            continue;
        }
        let base = plan.claimed.len();
        let wanted: Vec<u32> = claimed.iter().map(|c| c.offer.max_tasks).collect();
        let mut bytes = vec![0u64; claimed.len()];
        for (&i, w) in head.iter().zip(lease_slots(&wanted)) {
            let t = &tasks[i];
            let size = reply_bytes(t);
            let budget = claimed[w].offer.max_reply_bytes;
            if bytes[w] > 0 && bytes[w].saturating_add(size) > budget {
                // It would not fit; what follows must not go ahead of it.
                break;
            }
            bytes[w] = bytes[w].saturating_add(size);
            plan.matches[i] = Some(claimed[w].offer.to.clone());
            plan.owner[i] = Some(base + w);
        }
        plan.claimed.extend(claimed);
    }
    plan
}

/// What a task adds to a Lease reply at most, counted as the lease statements
/// count it.
fn reply_bytes(t: &NewTask) -> u64 {
    let metadata = crate::store::sync_match::metadata_json(t).len();
    let lengths = crate::domain::reply::lengths_of_new(t, metadata);
    crate::domain::reply::task_bytes(&lengths).unsigned_abs()
}

impl super::Broker {
    /// Per task, whether its queue lets it be sync-matched: no admission gates
    /// and no per-worker cap (their rules live in the lease statements), and
    /// the task carries no routing.
    pub(super) fn sync_matchable(&self, tasks: &[NewTask]) -> Vec<bool> {
        let mut queues: Vec<(&str, bool)> = Vec::new();
        tasks
            .iter()
            .map(|t| {
                if t.routing != crate::domain::routing::TaskRouting::default() {
                    return false;
                }
                if let Some((_, ok)) = queues.iter().find(|(q, _)| *q == t.queue) {
                    return *ok;
                }
                let ok = self.queue_matchable(&t.queue);
                queues.push((&t.queue, ok));
                ok
            })
            .collect()
    }

    /// Whether long-polls of `queue` alone may park for sync match.
    pub(super) fn queue_matchable(&self, queue: &str) -> bool {
        if self.store.capabilities().shared && !self.settings.sync_match_postgres {
            return false;
        }
        let q = [queue.to_string()];
        !self.settings.gated(&q) && self.settings.worker_caps(&q).is_empty()
    }

    pub(super) fn releaser(&self) -> Releaser {
        Releaser {
            store: self.store.clone(),
            clock: self.clock.clone(),
            dispatch: self.dispatch.clone(),
        }
    }

    /// Tasks this broker handed to a waiting long-poll in a Submit's own
    /// commit so far (sync match).
    pub fn sync_matched(&self) -> u64 {
        self.parked.handed()
    }

    /// Parks a long-poll of `queue` for sync match.
    pub(super) fn park(&self, queue: &str, offer: Offer) -> Parking {
        self.parked.park(queue, offer, Arc::new(self.releaser()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::StoredState;
    use crate::service::ManualClock;

    struct Fixture {
        parked: Arc<Parked>,
        release: Releaser,
        _dir: tempfile::TempDir,
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/t.db", dir.path().display());
        let store = crate::store::connect(&url, 4).await.unwrap();
        store.migrate().await.unwrap();
        Fixture {
            parked: Arc::default(),
            release: Releaser {
                store,
                clock: Arc::new(ManualClock::default()),
                dispatch: Arc::new(Dispatcher::new()),
            },
            _dir: dir,
        }
    }

    fn offer() -> Offer {
        Offer {
            to: MatchTo {
                worker_id: "w".into(),
                worker_address: String::new(),
                lease_duration: Duration::from_secs(30),
            },
            max_tasks: 1,
            max_reply_bytes: 1 << 20,
        }
    }

    /// A task of queue `q` inserted leased to the waiter of [`offer`].
    async fn leased(f: &Fixture, q: &str) -> TaskRecord {
        let now = f.release.clock.now();
        let t = NewTask {
            id: uuid::Uuid::now_v7().to_string(),
            queue: q.into(),
            key: None,
            payload: Vec::new(),
            priority: 0,
            run_at: now,
            deadline: None,
            retry: crate::domain::RetryPolicy::default(),
            metadata: Default::default(),
            routing: Default::default(),
            concurrency_key: None,
            checkpoint: None,
        };
        let mut got = f
            .release
            .store
            .task_insert_matched(&[t], &[Some(offer().to)], now)
            .await
            .unwrap();
        got.pop().unwrap().leased.expect("leased")
    }

    async fn state(f: &Fixture, id: &str) -> StoredState {
        f.release.store.task_get(id).await.unwrap().unwrap().state
    }

    #[tokio::test]
    async fn a_long_poll_gone_before_its_answer_gives_the_tasks_back() {
        let f = fixture().await;
        let parking = f.parked.park("q", offer(), Arc::new(f.release.clone()));
        let claimed = f.parked.claim("q", 1);
        assert_eq!(claimed.len(), 1);
        drop(parking);
        let task = leased(&f, "q").await;
        deliver(&f.parked, &f.release, claimed, vec![vec![task.clone()]]).await;
        assert_eq!(state(&f, &task.id).await, StoredState::Pending);
    }

    #[tokio::test]
    async fn a_long_poll_gone_after_its_answer_came_gives_the_tasks_back() {
        let f = fixture().await;
        let q = ["q2".to_string()];
        let handles = f.release.dispatch.handles(&q);
        let woken = handles.iter().next().unwrap().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let parking = f.parked.park("q2", offer(), Arc::new(f.release.clone()));
        let claimed = f.parked.claim("q2", 1);
        let task = leased(&f, "q2").await;
        deliver(&f.parked, &f.release, claimed, vec![vec![task.clone()]]).await;
        // The answer waits in the channel; the caller goes away unanswered.
        drop(parking);
        // Given back in the background, which then wakes the queue's waiters.
        tokio::time::timeout(Duration::from_secs(20), woken)
            .await
            .expect("the release woke the queue");
        assert_eq!(state(&f, &task.id).await, StoredState::Pending);
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_unclaimed_is_gone_from_the_registry() {
        let f = fixture().await;
        let parking = f.parked.park("q3", offer(), Arc::new(f.release.clone()));
        assert!(f.parked.any());
        assert!(parking.leave().await.is_empty());
        assert!(!f.parked.any());
        assert!(f.parked.claim("q3", 1).is_empty());
    }
}
