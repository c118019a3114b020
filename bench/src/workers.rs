//! The simulated workers of both phases: a per-task worker (lease 1, complete 1,
//! each Complete asking for the next task unless `--no-lease-next`)
//! and a batched worker (lease for free slots, up to `lease_batch`, complete
//! concurrently, like the client runtime), plus the shared [`Progress`] that says
//! when a phase is done.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use taskbroker_client::pb::LeasedTask;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::args::Mode;
use crate::rpc::{self, Broker, Errors};

/// Pause after a failed Lease, so a broken broker is not hammered in a tight loop.
const LEASE_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Instants of numbered events, relative to one origin, settable from many tasks
/// without a lock (0 means not yet).
pub struct Stamps {
    origin: Instant,
    nanos: Vec<AtomicU64>,
}

impl Stamps {
    pub fn new(origin: Instant, len: usize) -> Stamps {
        Stamps {
            origin,
            nanos: (0..len).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records now for event `i` (ignored when out of range).
    pub fn set_now(&self, i: usize) {
        if let Some(slot) = self.nanos.get(i) {
            let n = self.origin.elapsed().as_nanos().max(1);
            slot.store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }

    /// Records `at` (relative to the origin) for event `i`.
    #[cfg(test)]
    pub fn set(&self, i: usize, at: Duration) {
        self.nanos[i].store(
            u64::try_from(at.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// When event `i` happened, relative to the origin.
    pub fn get(&self, i: usize) -> Option<Duration> {
        match self.nanos.get(i)?.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }
}

/// How far a phase has come: completed tasks against the target, errors, and
/// (in the latency phase) when each task's lease reply arrived.
pub struct Progress {
    target: u64,
    completed: AtomicU64,
    done_at: OnceLock<Instant>,
    /// Cancelled when the target is reached (or the phase gives up): stops the workers.
    pub stop: CancellationToken,
    pub errors: Errors,
    /// Latency phase: the lease reply time of task N, found in its payload's first 8 bytes.
    pub leased: Option<Stamps>,
    /// Signalled after each stamp in `leased` (the closed loop waits on it).
    pub leased_signal: Notify,
}

impl Progress {
    pub fn new(target: u64, leased: Option<Stamps>) -> Progress {
        Progress {
            target,
            completed: AtomicU64::new(0),
            done_at: OnceLock::new(),
            stop: CancellationToken::new(),
            errors: Errors::default(),
            leased,
            leased_signal: Notify::new(),
        }
    }

    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// When the last task was completed, if it was.
    pub fn done_at(&self) -> Option<Instant> {
        self.done_at.get().copied()
    }

    fn on_leased(&self, task: &LeasedTask) {
        if let Some(stamps) = &self.leased
            && let Some(seq) = payload_seq(&task.payload)
        {
            stamps.set_now(seq);
            // One stored permit is enough: the waiter checks its stamp after waking.
            self.leased_signal.notify_one();
        }
    }

    fn on_completed(&self) {
        if self.completed.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            let _ = self.done_at.set(Instant::now());
            self.stop.cancel();
        }
    }
}

/// A payload of `len` bytes (at least 8) that starts with `seq`, little-endian.
pub fn payload_with_seq(seq: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(8)];
    p[..8].copy_from_slice(&seq.to_le_bytes());
    p
}

fn payload_seq(payload: &[u8]) -> Option<usize> {
    let bytes: [u8; 8] = payload.get(..8)?.try_into().ok()?;
    usize::try_from(u64::from_le_bytes(bytes)).ok()
}

/// Starts one worker per client on `queue`; they run until `progress.stop`.
pub fn spawn_all(
    clients: &[Broker],
    queue: &str,
    mode: Mode,
    lease_batch: u32,
    progress: &Arc<Progress>,
) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        let w = Worker {
            client: client.clone(),
            id: format!("bench-w{i}"),
            queue: queue.to_string(),
            progress: progress.clone(),
        };
        match mode {
            Mode::PerTask => set.spawn(w.run_per_task()),
            Mode::Batched => set.spawn(w.run_batched(lease_batch)),
        };
    }
    set
}

struct Worker {
    client: Broker,
    id: String,
    queue: String,
    progress: Arc<Progress>,
}

impl Worker {
    /// Lease one, complete it, repeat, one at a time. The Complete asks for the
    /// next task (lease_next; no wait), so a busy worker makes two RPCs
    /// per task; a long-poll Lease only when none came back (or `--no-lease-next`).
    async fn run_per_task(mut self) {
        let p = self.progress.clone();
        let mut next = Vec::new();
        loop {
            let tasks = if next.is_empty() {
                let Some(tasks) = self.lease(1).await else {
                    return;
                };
                tasks
            } else {
                std::mem::take(&mut next)
            };
            for task in tasks {
                p.on_leased(&task);
                let ask = (!p.stop.is_cancelled())
                    .then(|| rpc::lease_next(&self.id, &self.queue, 1))
                    .flatten();
                let (done, more) = rpc::complete(&mut self.client, &task, &p.errors, ask).await;
                if done {
                    p.on_completed();
                }
                next.extend(more);
            }
        }
    }

    /// Lease for free slots only (up to `lease_batch`), complete each leased batch
    /// in one concurrent CompleteMany call, and lease again meanwhile.
    async fn run_batched(mut self, lease_batch: u32) {
        let p = self.progress.clone();
        let slots = Arc::new(Semaphore::new(lease_batch as usize));
        let mut completing = JoinSet::new();
        loop {
            // Wait for at least one free slot, then take every other free one.
            let first = tokio::select! {
                _ = p.stop.cancelled() => break,
                // The semaphore is never closed, so acquiring only waits.
                permit = slots.clone().acquire_owned() => permit.expect("semaphore closed"),
            };
            let mut permits = vec![first];
            while permits.len() < lease_batch as usize {
                match slots.clone().try_acquire_owned() {
                    Ok(permit) => permits.push(permit),
                    Err(_) => break,
                }
            }
            let Some(tasks) = self.lease(permits.len() as u32).await else {
                break;
            };
            if tasks.is_empty() {
                continue;
            }
            // The broker never returns more than max_tasks, so a permit is left for
            // each task; the unused ones go back now.
            permits.truncate(tasks.len());
            for task in &tasks {
                p.on_leased(task);
            }
            // The handlers are no-ops: the whole lease batch is reported in one call,
            // which (with --batched-lease-next) asks for as many next tasks as it frees
            // slots (lease_next); those are reported the same way, until none
            // comes back.
            let (mut client, p) = (self.client.clone(), p.clone());
            let (id, queue) = (self.id.clone(), self.queue.clone());
            completing.spawn(async move {
                let (mut tasks, mut permits) = (tasks, permits);
                loop {
                    let ask = (!p.stop.is_cancelled())
                        .then(|| rpc::lease_next(&id, &queue, permits.len() as u32))
                        .flatten();
                    let (n, next) = rpc::complete_many(&mut client, &tasks, &p.errors, ask).await;
                    for _ in 0..n {
                        p.on_completed();
                    }
                    if next.is_empty() {
                        break;
                    }
                    permits.truncate(next.len());
                    for task in &next {
                        p.on_leased(task);
                    }
                    tasks = next;
                }
                drop(permits);
            });
            while completing.try_join_next().is_some() {}
        }
        // Stopped: either every task is complete, or the phase gave up.
        completing.shutdown().await;
    }

    /// One long-poll Lease; None once the phase is stopped. An error is counted
    /// and answered with an empty list after a pause.
    async fn lease(&mut self, max_tasks: u32) -> Option<Vec<LeasedTask>> {
        let request = rpc::lease_request(&self.id, &self.queue, max_tasks);
        let reply = tokio::select! {
            // Dropping the call resets its HTTP/2 stream; the broker drops the waiter.
            _ = self.progress.stop.cancelled() => return None,
            reply = self.client.lease(request) => reply,
        };
        match reply {
            Ok(reply) => Some(reply.into_inner().tasks),
            Err(status) => {
                self.progress.errors.record("Lease", &status);
                tokio::select! {
                    _ = self.progress.stop.cancelled() => None,
                    _ = tokio::time::sleep(LEASE_ERROR_PAUSE) => Some(Vec::new()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_carries_its_sequence_number() {
        assert_eq!(payload_seq(&payload_with_seq(42, 64)), Some(42));
        assert_eq!(payload_with_seq(7, 0).len(), 8);
        assert_eq!(payload_seq(&[1, 2, 3]), None);
    }

    #[test]
    fn progress_stops_the_phase_at_its_target() {
        let p = Progress::new(2, None);
        p.on_completed();
        assert!(!p.stop.is_cancelled() && p.done_at().is_none());
        p.on_completed();
        assert!(p.stop.is_cancelled() && p.done_at().is_some());
    }

    #[test]
    fn stamps_are_unset_until_set() {
        let s = Stamps::new(Instant::now(), 2);
        assert_eq!(s.get(0), None);
        s.set_now(0);
        s.set_now(5);
        assert!(s.get(0).is_some());
        assert_eq!(s.get(5), None);
    }
}
