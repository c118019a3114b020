//! What a leased task costs a Lease reply: an upper bound of the bytes its
//! `LeasedTask` takes in the encoded reply (a LeaseResponse, or the
//! `next_tasks` of a settle), worked out from the lengths of its variable
//! fields as they are stored. The lease statements add up the same sum in SQL
//! over the stored columns (`store::reply`), and take tasks in lease order while
//! the reply's sum stays within `limits.max_lease_reply_bytes`; since the sum is
//! never below what the reply encodes, no reply is larger than that budget and
//! a client with the default 4 MiB receive limit decodes every one.
//!
//! The bound, field by field (protobuf: a tag, a length prefix, the bytes):
//! - strings and bytes (id, queue, key, payload, checkpoint, concurrency key,
//!   fan-out group): their length, plus a tag (two bytes for field numbers from
//!   16) and a length prefix at its widest for the field's limit;
//! - metadata, a `map<string, string>`: the stored JSON (`{"k":"v",...}`) and a
//!   sixteenth of it. An entry of short strings takes no more bytes in protobuf
//!   (three tags, three one-byte lengths) than in JSON (four quotes, a colon, a
//!   comma); an entry of 128 bytes or more takes at most six more bytes, under a
//!   sixteenth of its JSON; JSON escapes only add to the JSON;
//! - the lease token, written by the lease itself: at most
//!   [`LEASE_TOKEN_MAX_BYTES`] (SQLite 32, Postgres 36, MySQL 52);
//! - the numbers, timestamps and flags: at their widest varints;
//! - the task's own tag and length prefix in the reply's repeated field.
//!
//! `dependency_results` are added by the service after the lease, a task's
//! results whole or not at all, each entry counted by
//! [`dependency_results_bytes`].

use super::model::{NewTask, TaskRecord};

/// The longest lease token any store writes.
pub const LEASE_TOKEN_MAX_BYTES: i64 = 64;

/// What a leased task's reply entry takes besides the bytes of its variable
/// fields (see the module docs): tags and widest length prefixes of the
/// strings and bytes (task_id 3, queue 3, payload 6, key 3, checkpoint 6,
/// fanout_group 4, concurrency_key 4), the lease token with its tag and length
/// (2 + 64), priority 11, attempt 6, fencing_token 11, max_attempts 6, three
/// timestamps of 19 (deadline, lease_expires_at, created_at), has_checkpoint 2,
/// at_most_once 3, and the entry's own tag and length prefix in the reply, 6.
pub const TASK_FIXED_BYTES: i64 =
    3 + 3 + 6 + 3 + 6 + 4 + 4 + (2 + LEASE_TOKEN_MAX_BYTES) + 11 + 6 + 11 + 6 + 3 * 19 + 2 + 3 + 6;

/// What one entry of `dependency_results` adds to a task's reply entry besides
/// the dependency's id and result: the map field's two-byte tag, the entry's
/// length prefix (3), the key's tag and length (2), the value's tag and length
/// (4), rounded up.
pub const RESULT_ENTRY_BYTES: u64 = 16;

/// The byte lengths of a task's variable fields as stored (metadata as its
/// stored JSON), 0 for one it does not have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lengths {
    pub id: i64,
    pub queue: i64,
    pub key: i64,
    pub payload: i64,
    pub checkpoint: i64,
    pub metadata_json: i64,
    pub concurrency_key: i64,
    pub fanout_group: i64,
}

/// The reply bytes of a leased task of these lengths, at most (without its
/// dependency results).
pub fn task_bytes(l: &Lengths) -> i64 {
    l.id.saturating_add(l.queue)
        .saturating_add(l.key)
        .saturating_add(l.payload)
        .saturating_add(l.checkpoint)
        .saturating_add(metadata_bytes(l.metadata_json))
        .saturating_add(l.concurrency_key)
        .saturating_add(l.fanout_group)
        .saturating_add(TASK_FIXED_BYTES)
}

/// The bytes a metadata map whose stored JSON is `json` bytes takes in a reply,
/// at most.
pub fn metadata_bytes(json: i64) -> i64 {
    json.saturating_add(json / 16)
}

/// The reply bytes of dependency results: `n` entries whose ids and results
/// come to `bytes`.
pub fn dependency_results_bytes(n: u64, bytes: u64) -> u64 {
    bytes.saturating_add(n.saturating_mul(RESULT_ENTRY_BYTES))
}

fn len(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The lengths of a leased task (metadata serialised as the stores store it).
pub fn lengths_of_record(t: &TaskRecord) -> Lengths {
    Lengths {
        id: len(t.id.len()),
        queue: len(t.queue.len()),
        key: len(t.key.as_ref().map_or(0, String::len)),
        payload: len(t.payload.len()),
        checkpoint: len(t.checkpoint.as_ref().map_or(0, Vec::len)),
        metadata_json: len(serde_json::to_string(&t.metadata).map_or(0, |m| m.len())),
        concurrency_key: len(t.concurrency_key.as_ref().map_or(0, String::len)),
        fanout_group: len(t.routing.fanout_group.as_ref().map_or(0, String::len)),
    }
}

/// The lengths of a task about to be inserted leased (sync match), whose
/// stored metadata is `metadata_json` bytes.
pub fn lengths_of_new(t: &NewTask, metadata_json: usize) -> Lengths {
    Lengths {
        id: len(t.id.len()),
        queue: len(t.queue.len()),
        key: len(t.key.as_ref().map_or(0, String::len)),
        payload: len(t.payload.len()),
        checkpoint: len(t.checkpoint.as_ref().map_or(0, Vec::len)),
        metadata_json: len(metadata_json),
        concurrency_key: len(t.concurrency_key.as_ref().map_or(0, String::len)),
        fanout_group: len(t.routing.fanout_group.as_ref().map_or(0, String::len)),
    }
}

/// The reply bytes of a leased task, at most, without its dependency results.
pub fn record_bytes(t: &TaskRecord) -> u64 {
    task_bytes(&lengths_of_record(t)).max(0).unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_part_adds_up() {
        assert_eq!(TASK_FIXED_BYTES, 197);
    }

    #[test]
    fn metadata_counts_a_sixteenth_more_than_its_json() {
        assert_eq!(metadata_bytes(2), 2);
        assert_eq!(metadata_bytes(160), 170);
    }
}
