//! Taking, extending and giving back leases.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::*;

/// Taking leases, holding and giving them back: the plain, batched and gated
/// leases, the long-poll's next due time, lease extension and release.
#[async_trait]
pub trait Leasing: Send + Sync + 'static {
    /// Leases up to `max_tasks` ready tasks in lease order, each with a new token and
    /// fencing token. Tasks come back in lease order. (An attempt's row is written
    /// when it ends; until then `attempt_list` shows it from the task.)
    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>>;

    /// Serves several lease requests for the same queues at once (the waiting
    /// long-polls of those queues), one answer per request, in order. When there
    /// are fewer ready tasks than asked for, they are shared out one at a time in
    /// request order (see [`lease_shares`]), so every waiter gets some. Each
    /// request's tasks are in lease order and leased to its worker. All requests
    /// must name the same queues; they are leased at the latest of their `now`.
    async fn task_lease_many(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            out.push(self.task_lease_available(p).await?);
        }
        Ok(out)
    }

    /// The earliest `run_at` after `now` of a pending task in these queues, so a
    /// long-poll knows when to look again.
    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>>;

    /// Extends live leases, each by `extend_by` or the duration it was leased with,
    /// capped at the task's deadline. One status per lease, in order.
    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>>;

    /// Leases as `task_lease_many` does, through every gate of the queues'
    /// stored settings (pause, concurrency and rate limits, fairness, aging),
    /// enforced for the whole cluster. Used only for queues with gates.
    async fn task_lease_gated(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>>;

    /// Gives back leases nobody received (their long-poll went away before the
    /// answer): each task still leased under its token becomes pending again as
    /// if the lease had not been taken (the attempt is not counted; the fencing
    /// token stays spent), and its queue is notified. Returns how many.
    async fn lease_release(&self, leases: &[LeaseRef], now: DateTime<Utc>) -> StoreResult<u64>;
}

/// The seqs a plain lease takes of its candidates (`(seq, size, fan-out
/// group)`, in lease order): the first always; then each while the reply's
/// bytes stay within `max_reply_bytes` (the running total counts every
/// candidate up to it in lease order); of a distinct fan-out group, only its
/// first copy. The same cut on every database that picks in Rust.
pub(crate) fn within_reply_budget<'a>(
    found: impl IntoIterator<Item = (i64, i64, Option<&'a str>)>,
    max_reply_bytes: u64,
) -> Vec<i64> {
    let budget = i64::try_from(max_reply_bytes).unwrap_or(i64::MAX);
    let mut total: i64 = 0;
    let mut groups: Vec<&str> = Vec::new();
    let mut taken: Vec<i64> = Vec::new();
    for (seq, size, fgroup) in found {
        total = total.saturating_add(size);
        let first_copy = match fgroup {
            None => true,
            Some(g) if groups.contains(&g) => false,
            Some(g) => {
                groups.push(g);
                true
            }
        };
        if (total <= budget || total == size) && first_copy {
            taken.push(seq);
        }
    }
    taken
}

/// A batched lease's requests as each first leases its share (`shares`, as
/// [`lease_shares`] gives them, all at `now`): `None` for a request whose
/// share is none.
pub(crate) fn share_requests(
    ps: &[LeaseParams],
    shares: &[u32],
    now: DateTime<Utc>,
) -> Vec<Option<LeaseParams>> {
    ps.iter()
        .zip(shares)
        .map(|(p, &share)| {
            (share > 0).then(|| LeaseParams {
                max_tasks: share,
                now,
                ..p.clone()
            })
        })
        .collect()
}

/// What a batched lease's requests ask again for once each has leased its
/// share (`got`: how many each got). Routing: a request that got less than
/// its share (tasks it may not take, or its cap) leaves tasks behind that the
/// others may take, so each that still wants some asks again for the rest, in
/// request order (the index, and its params). Empty when every request got
/// its share.
pub(crate) fn top_up_requests(
    ps: &[LeaseParams],
    got: &[usize],
    shares: &[u32],
    now: DateTime<Utc>,
) -> Vec<(usize, LeaseParams)> {
    if !got
        .iter()
        .zip(shares)
        .any(|(&got, &share)| got < share as usize)
    {
        return Vec::new();
    }
    ps.iter()
        .zip(got)
        .enumerate()
        .filter_map(|(i, (p, &got))| {
            let more = p
                .max_tasks
                .saturating_sub(u32::try_from(got).unwrap_or(u32::MAX));
            (more > 0).then(|| {
                let p = LeaseParams {
                    max_tasks: more,
                    now,
                    ..p.clone()
                };
                (i, p)
            })
        })
        .collect()
}
