//! Flow: the watch stream. One tailer per broker process reads the event
//! log in id order (only events that are final: see `Store::event_read`) and
//! fans it out; each watcher catches up from its own cursor in the store first,
//! then follows the fan-out, and falls back to the store whenever it cannot
//! prove the fan-out continues exactly where it stands. So a watch delivers
//! every matching event after its cursor exactly once, on any replica.
//!
//! The tailer starts at the store's head, never at a watcher's cursor: no
//! watcher's cursor moves what the others receive. A cursor beyond the last
//! event recorded is refused (OUT_OF_RANGE), not waited on.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};

use super::ServiceError;
use crate::domain::event::EventKind;
use crate::store::{EventRecord, Store};

/// Events read from the store at once.
const READ_BATCH: u32 = 1000;
/// How often the tailer looks for new events while anyone watches.
const POLL: Duration = Duration::from_millis(100);
/// Batches a slow watcher may fall behind before it reads from the store instead.
const FANOUT_CAPACITY: usize = 1024;

/// A contiguous stretch of the log: every final event in `(after, upto]`.
#[derive(Debug)]
pub struct Stretch {
    pub after: i64,
    pub upto: i64,
    pub events: Vec<EventRecord>,
}

/// Which events a watcher wants; empty sets match everything.
#[derive(Debug, Clone, Default)]
pub struct WatchFilter {
    pub task_ids: HashSet<String>,
    pub queues: HashSet<String>,
    pub kinds: HashSet<EventKind>,
}

impl WatchFilter {
    pub fn matches(&self, e: &EventRecord) -> bool {
        (self.task_ids.is_empty() || self.task_ids.contains(&e.task_id))
            && (self.queues.is_empty() || self.queues.contains(&e.queue))
            && (self.kinds.is_empty() || self.kinds.contains(&e.kind))
    }
}

pub struct EventHub {
    store: Arc<dyn Store>,
    fanout: broadcast::Sender<Arc<Stretch>>,
    /// Whether the tailer runs (it stops when nobody watches).
    running: Mutex<bool>,
}

impl EventHub {
    pub fn new(store: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(EventHub {
            store,
            fanout: broadcast::channel(FANOUT_CAPACITY).0,
            running: Mutex::new(false),
        })
    }

    /// The cursor a watch starts from: after `after`, or at the head when
    /// `None`. A cursor beyond every event recorded so far (made up, or kept
    /// from a database that was since restored from an older backup) is
    /// OUT_OF_RANGE: no event would ever follow it in order.
    pub async fn cursor(&self, after: Option<i64>) -> Result<i64, ServiceError> {
        match after {
            None => Ok(self.store.event_head().await?),
            Some(a) if a > self.store.event_ceiling().await? => Err(out_of_range()),
            Some(a) => Ok(a),
        }
    }

    /// Subscribes to the fan-out, starting the tailer if it is not running. The
    /// tailer starts at the store's head as read before this subscription (never
    /// at a watcher's cursor): the store read that follows a subscription reaches
    /// at least that far (heads never go back), so a stretch never starts past
    /// what its watcher has read without the watcher noticing.
    async fn subscribe(
        self: &Arc<Self>,
    ) -> Result<broadcast::Receiver<Arc<Stretch>>, ServiceError> {
        let head = self.store.event_head().await?;
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let rx = self.fanout.subscribe();
        if !*running {
            *running = true;
            let hub = self.clone();
            tokio::spawn(async move { hub.tail(head).await });
        }
        Ok(rx)
    }

    async fn tail(self: Arc<Self>, from: i64) {
        let mut cursor = from;
        loop {
            {
                let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
                if self.fanout.receiver_count() == 0 {
                    *running = false;
                    return;
                }
            }
            match self.store.event_read(cursor, READ_BATCH).await {
                Ok(events) if !events.is_empty() => {
                    let full = events.len() as u32 == READ_BATCH;
                    let upto = events.last().map_or(cursor, |e| e.event_id);
                    let stretch = Stretch {
                        after: cursor,
                        upto,
                        events,
                    };
                    cursor = upto;
                    let _ = self.fanout.send(Arc::new(stretch));
                    if full {
                        continue;
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "event tailer cannot read"),
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Streams the events after `after` that match `filter` into `out`, in
    /// batches, until the receiver goes away.
    pub fn watch(
        self: &Arc<Self>,
        filter: WatchFilter,
        after: i64,
        out: mpsc::Sender<Result<Vec<EventRecord>, ServiceError>>,
    ) {
        let hub = self.clone();
        tokio::spawn(async move {
            if let Err(e) = hub.follow(filter, after, &out).await {
                let _ = out.send(Err(e)).await;
            }
        });
    }

    async fn follow(
        self: &Arc<Self>,
        filter: WatchFilter,
        mut last: i64,
        out: &mpsc::Sender<Result<Vec<EventRecord>, ServiceError>>,
    ) -> Result<(), ServiceError> {
        'catch_up: loop {
            // Subscribed before reading the store: every stretch published from now
            // on starts at or before where the reading below ends.
            let mut rx = self.subscribe().await?;
            loop {
                let events = self.store.event_read(last, READ_BATCH).await?;
                let full = events.len() as u32 == READ_BATCH;
                if let Some(e) = events.last() {
                    last = e.event_id;
                }
                if !send(out, &filter, events).await {
                    return Ok(());
                }
                if !full {
                    break;
                }
            }
            loop {
                let stretch = tokio::select! {
                    _ = out.closed() => return Ok(()),
                    r = rx.recv() => r,
                };
                match stretch {
                    Ok(s) if s.after > last => continue 'catch_up,
                    Ok(s) => {
                        let fresh: Vec<EventRecord> = s
                            .events
                            .iter()
                            .filter(|e| e.event_id > last)
                            .cloned()
                            .collect();
                        last = last.max(s.upto);
                        if !send(out, &filter, fresh).await {
                            return Ok(());
                        }
                    }
                    // Fell behind, or the tailer stopped: read the store again.
                    Err(_) => continue 'catch_up,
                }
            }
        }
    }
}

fn out_of_range() -> ServiceError {
    ServiceError::OutOfRange(crate::domain::validate::Invalid::new(
        "after_event_id",
        "is beyond the last event recorded",
    ))
}

/// Sends the matching events; `false` when the watcher went away.
async fn send(
    out: &mpsc::Sender<Result<Vec<EventRecord>, ServiceError>>,
    filter: &WatchFilter,
    events: Vec<EventRecord>,
) -> bool {
    let matching: Vec<EventRecord> = events.into_iter().filter(|e| filter.matches(e)).collect();
    if matching.is_empty() {
        return !out.is_closed();
    }
    for chunk in matching.chunks(500) {
        if out.send(Ok(chunk.to_vec())).await.is_err() {
            return false;
        }
    }
    true
}
