//! Wake-ups across replicas without LISTEN/NOTIFY: each replica polls the event
//! counter (`event_seq`, one primary-key read), every 5 ms while it moves and
//! backing off to every 25 ms while it does not. When it moved, the events in
//! between name the queues that got READY tasks (submitted, retried, requeued,
//! unblocked, released), and those queues' long-polls wake, except for the
//! events of this replica's own Submits: its broker woke its own waiters as it
//! committed (`taskbroker_notifications_own_skipped_total`). An id with no event
//! (a job left rows locked and untaken, or a queue's settings changed) or more
//! events than one read takes wakes every queue. Pick-up latency across
//! replicas is the poll interval at most (docs/deploy.md has the figure).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;

use super::super::super::{NotificationStats, StoreResult, Waker};
use super::super::sql;

/// The fastest poll, while the counter moves.
pub(crate) const POLL_MIN: Duration = Duration::from_millis(5);
/// The slowest poll, after it stood still a while.
pub(crate) const POLL_MAX: Duration = Duration::from_millis(25);
/// Events read per poll; more wake every queue.
const READ: i64 = 512;

#[derive(Default)]
pub(crate) struct Notes {
    received: AtomicU64,
    own_skipped: AtomicU64,
    /// The id ranges of events this replica committed that its poller has not
    /// passed yet.
    own: std::sync::Mutex<std::collections::VecDeque<(i64, i64)>>,
}

/// Ranges kept at most (a poller that stopped must not make them grow forever).
const OWN_KEPT: usize = 4096;

impl Notes {
    pub fn stats(&self) -> NotificationStats {
        NotificationStats {
            received: self.received.load(Relaxed),
            own_skipped: self.own_skipped.load(Relaxed),
        }
    }

    /// Records the ids of events this replica committed.
    pub fn own(&self, ids: (i64, i64)) {
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        if own.len() >= OWN_KEPT {
            own.pop_front();
        }
        own.push_back(ids);
    }

    fn is_own(&self, id: i64) -> bool {
        let own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        own.iter().any(|&(a, b)| a <= id && id <= b)
    }

    /// Forgets the ranges at or below `upto` (the poller passed them).
    fn passed(&self, upto: i64) {
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        own.retain(|&(_, b)| b > upto);
    }
}

async fn head(pool: &MySqlPool) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(sql::LISTEN_HEAD).fetch_one(pool).await?)
}

/// Wakes the queues of other replicas' READY events in `(last, n]`, or every queue.
async fn wake_between(
    pool: &MySqlPool,
    wake: &Waker,
    notes: &Notes,
    last: i64,
    n: i64,
) -> StoreResult<()> {
    if n - last > READ {
        wake(None);
        return Ok(());
    }
    let rows: Vec<(i64, String, String)> = sqlx::query_as(sql::LISTEN_EVENTS)
        .bind(last)
        .bind(n)
        .fetch_all(pool)
        .await?;
    if (rows.len() as i64) < n - last {
        wake(None);
        return Ok(());
    }
    let mut queues: Vec<&str> = Vec::new();
    for (id, q, state) in &rows {
        if state != "ready" {
            continue;
        }
        if notes.is_own(*id) {
            notes.own_skipped.fetch_add(1, Relaxed);
        } else {
            queues.push(q.as_str());
        }
    }
    queues.sort_unstable();
    queues.dedup();
    for q in queues {
        wake(Some(q));
    }
    Ok(())
}

pub(crate) fn spawn(
    pool: MySqlPool,
    wake: Waker,
    stop: CancellationToken,
    notes: std::sync::Arc<Notes>,
) {
    tokio::spawn(async move {
        loop {
            let poller = async {
                let mut last = head(&pool).await?;
                // Whatever happened while nobody polled.
                wake(None);
                let mut interval = POLL_MIN;
                loop {
                    tokio::time::sleep(interval).await;
                    let n = head(&pool).await?;
                    if n == last {
                        interval = (interval * 2).min(POLL_MAX);
                        continue;
                    }
                    notes.received.fetch_add(1, Relaxed);
                    wake_between(&pool, &wake, &notes, last, n).await?;
                    notes.passed(n);
                    last = n;
                    interval = POLL_MIN;
                }
                #[allow(unreachable_code)]
                Ok::<(), super::super::super::StoreError>(())
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                res = poller => {
                    if let Err(e) = res {
                        tracing::warn!(error = %e, "wake-up poller failed; retrying");
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    });
}
