//! The reply bound of `domain::reply` holds for what the API really encodes:
//! for any leased task, its `LeasedTask` in a LeaseResponse (its entry's tag and
//! length included) takes no more bytes than the bound the lease statements
//! count, dependency results included.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use prost::Message;

use super::leased_task;
use crate::domain::StoredState;
use crate::domain::model::TaskRecord;
use crate::domain::reply;
use crate::pb;

fn record() -> TaskRecord {
    let far = DateTime::<Utc>::from_timestamp_millis(253_402_300_799_999).unwrap();
    TaskRecord {
        seq: i64::MAX,
        id: uuid::Uuid::now_v7().to_string(),
        queue: String::new(),
        key: None,
        payload: Vec::new(),
        priority: i32::MIN,
        run_at: far,
        deadline: Some(far),
        state: StoredState::Leased,
        attempt: u32::MAX,
        max_attempts: u32::MAX,
        attempts_allowed: u32::MAX,
        retry: Default::default(),
        metadata: BTreeMap::new(),
        created_at: far,
        updated_at: far,
        last_error: None,
        checkpoint: None,
        result: None,
        leased_by: None,
        lease_token: Some("t".repeat(reply::LEASE_TOKEN_MAX_BYTES as usize)),
        lease_expires_at: Some(far),
        fencing_token: u64::MAX,
        finished_at: None,
        cancel_requested: false,
        schedule_id: None,
        fire_time: None,
        routing: Default::default(),
        concurrency_key: None,
        retry_schedule: Vec::new(),
        dependency_results: BTreeMap::new(),
    }
}

/// What the task takes in an encoded LeaseResponse.
fn encoded(t: &TaskRecord) -> u64 {
    pb::LeaseResponse {
        tasks: vec![leased_task(t.clone())],
    }
    .encoded_len() as u64
}

/// The bound the lease counts, with the dependency results the service adds.
fn bound(t: &TaskRecord) -> u64 {
    let results: u64 = t
        .dependency_results
        .iter()
        .map(|(id, r)| (id.len() + r.len()) as u64)
        .sum();
    reply::record_bytes(t)
        + reply::dependency_results_bytes(t.dependency_results.len() as u64, results)
}

#[test]
fn a_task_with_every_field_at_its_largest_stays_within_its_bound() {
    let mut t = record();
    t.queue = "q".repeat(128);
    t.key = Some("k".repeat(512));
    t.concurrency_key = Some("c".repeat(256));
    t.payload = vec![0xff; 1 << 20];
    t.checkpoint = Some(vec![0xff; 1 << 20]);
    t.routing.fanout_group = Some(uuid::Uuid::now_v7().to_string());
    // 64 entries and 16 KiB (the submit limits), and the broker's own entries.
    for i in 0..63 {
        t.metadata.insert(format!("k{i:02}"), "v".repeat(200));
    }
    t.metadata.insert("big".into(), "é".repeat(1500));
    t.metadata
        .insert("taskbroker.producer".into(), "p".repeat(256));
    t.metadata
        .insert("taskbroker.dependencies".into(), "true".into());
    t.metadata
        .insert("taskbroker.at_most_once".into(), "true".into());
    t.metadata.insert(
        "traceparent".into(),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
    );
    for _ in 0..1000 {
        t.dependency_results
            .insert(uuid::Uuid::now_v7().to_string(), vec![1; 1000]);
    }
    t.dependency_results
        .insert(uuid::Uuid::now_v7().to_string(), vec![1; 1 << 20]);
    assert!(encoded(&t) <= bound(&t), "{} > {}", encoded(&t), bound(&t));
}

#[test]
fn a_task_with_every_field_empty_stays_within_its_bound() {
    let t = record();
    assert!(encoded(&t) <= bound(&t));
    // The bound is not wasteful: within the fixed part of what it counts.
    assert!(bound(&t) - encoded(&t) <= reply::TASK_FIXED_BYTES as u64);
}

/// Strings of lengths around the varint boundaries, with characters JSON
/// escapes and characters of several bytes.
fn text() -> impl Strategy<Value = String> {
    let len = prop_oneof![0usize..4, 120usize..136, 16_370usize..16_400];
    (
        len,
        prop_oneof![Just('a'), Just('"'), Just('\u{1}'), Just('é'), Just('€')],
    )
        .prop_map(|(n, c)| std::iter::repeat_n(c, n).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_task_stays_within_its_bound(
        metadata in proptest::collection::btree_map(text(), text(), 0..6),
        results in proptest::collection::vec(0usize..300, 0..4),
        payload in prop_oneof![0usize..3, 125usize..131, 2_097_140usize..2_097_160],
        key in 0usize..=512,
        priority in any::<i32>(),
    ) {
        let mut t = record();
        t.metadata = metadata;
        t.payload = vec![7; payload];
        t.key = Some("k".repeat(key));
        t.priority = priority;
        t.dependency_results = results
            .into_iter()
            .map(|n| (uuid::Uuid::now_v7().to_string(), vec![0; n]))
            .collect();
        prop_assert!(encoded(&t) <= bound(&t), "{} > {}", encoded(&t), bound(&t));
    }
}
