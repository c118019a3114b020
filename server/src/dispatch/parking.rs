//! Sync-match parking: the long-polls of this replica that wait for a task of
//! one queue and may be handed tasks by a Submit directly (the service's
//! sync match decides who takes part and inserts the tasks leased to them).
//! A waiter a Submit claimed is owed an answer: the tasks, or nothing (then it
//! looks again). A waiter that goes away after being claimed gives its tasks
//! back through [`GiveBack`].

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::domain::model::TaskRecord;
use crate::store::sync_match::MatchTo;

/// What a parked long-poll will take.
#[derive(Debug, Clone)]
pub struct Offer {
    pub to: MatchTo,
    pub max_tasks: u32,
    pub max_reply_bytes: u64,
}

struct Waiter {
    id: u64,
    offer: Offer,
    answer: oneshot::Sender<Vec<TaskRecord>>,
}

/// A waiter taken out of the registry by a Submit, which now owes it an answer.
pub struct Claimed {
    pub offer: Offer,
    pub answer: oneshot::Sender<Vec<TaskRecord>>,
}

/// The long-polls of this replica that wait for a task and may be handed one.
#[derive(Default)]
pub struct Parked {
    /// Waiters per queue, longest waiting first.
    queues: Mutex<HashMap<String, VecDeque<Waiter>>>,
    /// How many are parked: a Submit with none skips all of this.
    count: AtomicUsize,
    next_id: AtomicU64,
    /// Tasks handed to a long-poll so far (released ones included).
    handed: AtomicU64,
}

/// Gives back tasks leased to a parked long-poll that can no longer answer with
/// them (its call went away after a Submit claimed it): they become pending
/// again, or their leases expire.
pub trait GiveBack: Send + Sync {
    /// Starts giving `tasks` back; does not wait for it.
    fn give_back(&self, tasks: Vec<TaskRecord>);
}

impl Parked {
    /// Parks a long-poll of `queue` until [`Parking`] is dropped or left.
    pub fn park(
        self: &Arc<Self>,
        queue: &str,
        offer: Offer,
        release: Arc<dyn GiveBack>,
    ) -> Parking {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, rx) = oneshot::channel();
        // The lock is held for a map update only, never across an await.
        let mut map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(queue.to_string())
            .or_default()
            .push_back(Waiter { id, offer, answer });
        self.count.fetch_add(1, Ordering::Relaxed);
        Parking {
            parked: self.clone(),
            queue: queue.to_string(),
            id,
            rx: Some(rx),
            release,
        }
    }

    /// Whether any long-poll is parked: a Submit with none skips matching.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Removes waiter `id` if it is still parked; false if a Submit claimed it.
    pub fn unpark(&self, queue: &str, id: u64) -> bool {
        let mut map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let Some(waiters) = map.get_mut(queue) else {
            return false;
        };
        let Some(at) = waiters.iter().position(|w| w.id == id) else {
            return false;
        };
        waiters.remove(at);
        if waiters.is_empty() {
            map.remove(queue);
        }
        self.count.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Takes up to `n` waiters of `queue`, longest waiting first.
    /// Counts `n` tasks handed to long-polls.
    pub fn count_handed(&self, n: usize) {
        self.handed.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Tasks handed to long-polls so far (released ones included).
    pub fn handed(&self) -> u64 {
        self.handed.load(Ordering::Relaxed)
    }

    pub fn claim(&self, queue: &str, n: usize) -> Vec<Claimed> {
        let mut map = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let Some(waiters) = map.get_mut(queue) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while out.len() < n {
            let Some(w) = waiters.pop_front() else { break };
            self.count.fetch_sub(1, Ordering::Relaxed);
            // A waiter whose call went away is dropped here, unserved.
            if !w.answer.is_closed() {
                out.push(Claimed {
                    offer: w.offer,
                    answer: w.answer,
                });
            }
        }
        if waiters.is_empty() {
            map.remove(queue);
        }
        out
    }
}

/// A parked long-poll (see [`Parked::park`]).
pub struct Parking {
    parked: Arc<Parked>,
    queue: String,
    id: u64,
    rx: Option<oneshot::Receiver<Vec<TaskRecord>>>,
    release: Arc<dyn GiveBack>,
}

impl Parking {
    /// The tasks a Submit hands over (nothing: it claimed this waiter but had
    /// none to give after all, so look again). Pending while nobody claims it;
    /// nothing once answered.
    pub async fn answer(&mut self) -> Vec<TaskRecord> {
        let Some(rx) = self.rx.as_mut() else {
            return Vec::new();
        };
        let got = rx.await.unwrap_or_default();
        self.rx = None;
        got
    }

    /// Stops waiting: nothing if still parked, else what the claiming Submit
    /// hands over (it is waited for: those tasks are leased to this caller).
    pub async fn leave(mut self) -> Vec<TaskRecord> {
        if self.parked.unpark(&self.queue, self.id) {
            self.rx = None;
            return Vec::new();
        }
        self.answer().await
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        if self.parked.unpark(&self.queue, self.id) {
            return;
        }
        // Claimed: tasks already sent are given back; a Submit still at work
        // finds the channel closed and gives them back itself.
        if let Ok(tasks) = rx.try_recv() {
            self.release.give_back(tasks);
        }
    }
}
