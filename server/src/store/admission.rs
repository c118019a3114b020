//! Admission (#14, migration 0009): the stored queue settings and what both
//! stores' gated leases share (how the admitted tasks of several queues are
//! merged and handed to the requests served together). The gated leases
//! themselves are `sqlite/admission.rs` and `postgres/admission.rs`.

use chrono::{DateTime, Utc};

use super::{LEASE_REPLY_TASK_BYTES, LeaseParams, lease_slots};
use crate::domain::admission::{Candidate, QueueConfig};

/// A queue's stored settings.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredQueue {
    pub name: String,
    pub config: QueueConfig,
    /// When an operator last changed it; `None` while it is the configuration's seed.
    pub updated_at: Option<DateTime<Utc>>,
    /// Bumped by every change (compare-and-set for UpdateQueue).
    pub version: i64,
}

/// What Explain needs of a queue and a key, read now.
#[derive(Debug, Clone, Default)]
pub struct QueueUsage {
    pub config: QueueConfig,
    /// Leases held in the queue.
    pub leased: u64,
    /// Tasks holding leases of the key asked about (at most 100).
    pub key_holders: Vec<String>,
    /// The queue bucket's tokens now (refilled), with a rate limit.
    pub tokens: Option<f64>,
    /// The key bucket's tokens now (refilled), with a per-key rate limit.
    pub key_tokens: Option<f64>,
}

/// Gated candidates of a lease are read this many times the demand at a time
/// (more when keys close along the way), in at most [`MAX_PASSES`] reads.
pub const WINDOW_FACTOR: usize = 4;
pub const MAX_PASSES: usize = 8;

/// One admitted task: its candidate row, the index of its queue in the
/// request's queue list, and the request (index into `ps`) it goes to.
#[derive(Debug, Clone)]
pub struct Assigned {
    pub cand: Candidate,
    pub queue: usize,
    pub request: usize,
}

/// Merges the admitted candidates of every queue in lease order, keeps the
/// first `demand`, and hands them out slot by slot as the plain lease does; a
/// request takes its tasks while their bytes stay within its reply budget (and
/// always its first).
pub fn assign(mut admitted: Vec<(usize, Candidate)>, ps: &[LeaseParams]) -> Vec<Assigned> {
    admitted.sort_by_key(|(_, c)| c.sort_key());
    let wanted: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
    let mut bytes = vec![0i64; ps.len()];
    let mut out = Vec::new();
    for ((queue, cand), request) in admitted.into_iter().zip(lease_slots(&wanted)) {
        let budget = i64::try_from(ps[request].max_reply_bytes).unwrap_or(i64::MAX);
        let size = cand.size;
        let total = bytes[request].saturating_add(size);
        if bytes[request] > 0 && total > budget {
            continue;
        }
        bytes[request] = total;
        out.push(Assigned {
            cand,
            queue,
            request,
        });
    }
    out
}

/// The reply bytes of a task: what the lease statements count.
pub fn reply_size(payload: i64, checkpoint: i64, metadata: i64) -> i64 {
    payload + checkpoint + metadata + LEASE_REPLY_TASK_BYTES
}
