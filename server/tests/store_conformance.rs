//! The store conformance suite: the `Store` contract, written once and run against
//! SQLite, Postgres and MySQL. Time is passed in, so every case controls `now`.

mod common;

// The schedule methods (written as their own file, run here on both databases).
#[path = "store_conformance/schedules.rs"]
mod schedules;

use schedules::*;

// Routing.
#[path = "store_conformance/routing.rs"]
mod routing;

use routing::*;

// An operator's update changing a waiting task's target.
#[path = "store_conformance/retarget.rs"]
mod retarget;

use retarget::*;

// Admission: stored queue settings and the gated lease.
#[path = "store_conformance/admission.rs"]
mod admission;

use admission::*;

// The console: dead-letter groups (migration 0011).
#[path = "store_conformance/console.rs"]
mod console;

use console::*;

// Sync match.
#[path = "store_conformance/sync_match.rs"]
mod sync_match;

use sync_match::*;

// Fewer index writes per task (migration 0013).
#[path = "store_conformance/hot.rs"]
mod hot;

use hot::*;

// The plain lease over several queues .
#[path = "store_conformance/lease_order.rs"]
mod lease_order;

use lease_order::*;

// Leasers racing over plain, targeted, fan-out and scheduled tasks.
#[path = "store_conformance/lease_races.rs"]
mod lease_races;

use lease_races::*;

// Scheduled tasks wait outside the lease order (migration 0017).
#[path = "store_conformance/scheduled.rs"]
mod scheduled;

use scheduled::*;

// REPLACE_WAITING: a submission rewriting the waiting task that holds its key.
#[path = "store_conformance/replace.rs"]
mod replace;

use replace::*;

// Round-robin fairness across lease calls.
#[path = "store_conformance/lease_fairness.rs"]
mod lease_fairness;

use lease_fairness::*;

// Dependencies by key and the results a dependent's lease reads (migration 0020).
#[path = "store_conformance/flow_keys.rs"]
mod flow_keys;

use flow_keys::*;

// Dependencies across producers, and the waits one key may hold.
#[path = "store_conformance/key_owners.rs"]
mod key_owners;

use key_owners::*;

// A submitted checkpoint, stored by every insert.
#[path = "store_conformance/checkpoint.rs"]
mod checkpoint;

use checkpoint::*;

// Keys, ids, tokens and worker ids compare byte for byte.
#[path = "store_conformance/exact_text.rs"]
mod exact_text;

use exact_text::*;

// A lease's reply and a batch of completions, as written.
#[path = "store_conformance/settle_batch.rs"]
mod settle_batch;

use settle_batch::*;

use std::collections::{BTreeMap, HashSet};

use std::sync::Arc;

use std::time::Duration;

use chrono::{DateTime, Utc};

use common::*;

use taskbroker_server::domain::{RetryPolicy, StoredState, TaskState};

use taskbroker_server::store::{
    self, Changed, CompleteParams, FailParams, LeaseParams, LeaseRef, LeaseState, NewTask, Settled,
    Store, TaskFilter,
};

async fn open(b: Backend) -> Option<(Arc<dyn Store>, TestDb)> {
    let db = test_db(b).await?;
    let s = store::connect(&db.url, 8).await.expect("connect");
    s.migrate().await.expect("migrate");
    Some((s, db))
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000).unwrap()
}

fn task(queue: &str, n: usize) -> NewTask {
    NewTask {
        routing: Default::default(),
        id: uuid_like(n),
        queue: queue.into(),
        key: None,
        payload: n.to_string().into_bytes(),
        priority: 0,
        run_at: t0(),
        deadline: None,
        retry: RetryPolicy {
            initial_backoff: Duration::ZERO,
            jitter: 0.0,
            ..RetryPolicy::default()
        },
        metadata: BTreeMap::from([("traceparent".to_string(), format!("tp-{n}"))]),
        concurrency_key: None,
        checkpoint: None,
    }
}

fn uuid_like(n: usize) -> String {
    format!("00000000-0000-7000-8000-{n:012}")
}

fn lease_params(queue: &str, max: u32, now: DateTime<Utc>) -> LeaseParams {
    LeaseParams {
        routing: Default::default(),
        queues: vec![queue.into()],
        max_tasks: max,
        max_reply_bytes: 4 << 20,
        worker_id: "w".into(),
        worker_address: "127.0.0.1:1".into(),
        lease_duration: Duration::from_secs(30),
        now,
    }
}

fn secs(n: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(n)
}

fn completion(t: &store::TaskRecord, token: &str, now: DateTime<Utc>) -> CompleteParams {
    CompleteParams {
        task_id: t.id.clone(),
        lease_token: token.into(),
        result: b"ok".to_vec(),
        now,
    }
}

fn secs_after(s: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(s)
}

all_backends!(
    a_submitted_checkpoint_is_stored_by_every_insert,
    // Dependencies by key.
    a_key_dependency_waits_for_a_task_submitted_later,
    a_key_naming_an_existing_task_is_an_ordinary_dependency,
    a_key_whose_task_fails_follows_run_if_dependency_fails,
    a_blocked_task_goes_dead_at_its_deadline,
    key_waits_go_with_their_dependent_at_retention,
    racing_waits_and_keyed_inserts_always_bind,
    a_cycle_through_a_key_ends_at_a_deadline,
    dependencies_bind_only_to_the_same_producers_tasks,
    a_key_holds_a_bounded_number_of_waits_per_producer,
    replace_waiting_rewrites_a_waiting_task_and_its_place,
    replace_waiting_never_touches_a_leased_finished_or_other_queues_task,
    replace_waiting_rewrites_a_blocked_task,
    replace_waiting_racing_a_lease_never_changes_a_leased_task,
    schedules_insert_read_update_and_delete,
    schedule_due_reads_only_due_unpaused_schedules_in_order,
    schedule_fire_records_each_fire_time_and_its_task_once,
    schedule_fire_makes_copies_and_deduplicates_by_key,
    two_stores_racing_on_due_schedules_fire_each_once,
    // Routing.
    a_task_targeted_by_worker_id_goes_only_to_that_worker,
    a_changed_target_holds_for_the_next_lease,
    a_target_changes_to_labels_and_clears_to_anyone,
    a_leased_or_finished_task_keeps_its_target,
    a_list_filters_by_target_and_by_a_metadata_entry,
    plain_leases_keep_order_and_targets_around_a_routed_task,
    a_task_targeted_by_labels_goes_to_a_worker_with_all_of_them,
    a_task_nobody_may_take_does_not_block_the_tasks_behind_it,
    a_soft_sticky_retry_waits_for_its_worker_until_the_timeout,
    a_hard_sticky_retry_waits_for_its_worker_only,
    prefer_same_worker_reserves_one_retry_softly,
    six_copies_to_twenty_workers_are_each_done_once_by_six_workers,
    a_worker_that_completed_a_copy_never_gets_another,
    a_worker_never_holds_more_leases_of_a_queue_than_its_cap,
    requests_served_together_get_only_tasks_they_may_take,
    targets_sticky_fanout_and_caps_combine,
    workers_are_recorded_and_listed_with_their_leases,
    requests_with_the_same_labels_share_targeted_tasks,
    queue_settings_are_seeded_put_by_version_and_listed,
    a_gated_lease_holds_key_limits_and_spends_tokens,
    a_gated_lease_never_takes_a_task_twice,
    // The console.
    dead_letters_group_by_the_current_error_however_a_task_died,
    // Sync match.
    a_matched_task_is_inserted_leased_to_its_waiter,
    a_ready_task_that_would_lease_first_keeps_the_new_one_pending,
    matches_stand_only_at_the_head_of_their_queue,
    a_duplicate_key_is_answered_with_the_existing_task_unleased,
    a_sync_matched_lease_expires_and_is_leased_again,
    a_released_lease_is_pending_again_without_spending_an_attempt,
    routed_and_plain_tasks_served_together_keep_lease_order_per_worker,
    requests_of_one_worker_in_a_gated_batch_share_its_cap_in_turn,
    key_buckets_full_again_are_purged,
    // Fewer index writes per task (migration 0013).
    a_creation_time_range_lists_leased_tasks_in_their_place,
    retention_purges_old_finished_tasks_of_every_queue_and_state,
    queue_counts_see_leased_finished_and_pending_tasks,
    a_bulk_selection_by_creation_time_keeps_leased_tasks,
    // The plain lease over several queues .
    one_lease_takes_tasks_in_lease_order_across_queues,
    // Round-robin fairness across lease calls.
    round_robin_turns_persist_across_single_task_leases,
    a_multi_task_round_robin_lease_comes_in_turn_order,
    random_key_populations_are_served_round_robin_across_leases,
    // Scheduled tasks wait outside the lease order (migration 0017).
    a_scheduled_task_leases_exactly_when_due_in_priority_order,
    a_retry_backoff_waits_and_is_leased_when_due,
    an_update_moves_a_task_out_of_the_lease_order_and_back,
    requeued_and_reclaimed_tasks_lease_when_due,
    scheduled_tasks_of_higher_priority_do_not_hold_back_sync_match,
    racing_leasers_keep_fanout_copies_distinct_and_every_task_single,
    // Keys, ids, tokens and worker ids compare byte for byte.
    keys_differing_only_in_spaces_are_different_tasks,
    a_lease_token_with_spaces_added_is_not_the_lease,
    a_task_for_a_worker_is_not_leased_by_that_id_with_a_space,
    // A lease's reply and a batch of completions, as written.
    a_leased_record_is_the_row_as_stored,
    a_mixed_batch_settles_exactly_its_live_leases,
);

/// A lease over several queues locks the head of each; the rows it does not take
/// are announced (NOTIFY at commit), so a lease on another replica that skipped
/// them while they were locked does not sleep through them. Postgres only: SQLite
/// has one writer and no row locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_locked_but_not_taken_are_announced() {
    let Some((s, db)) = open(Backend::Postgres).await else {
        return;
    };
    let high = NewTask {
        priority: 5,
        ..task("x", 1)
    };
    s.task_insert_many(&[high, task("y", 2)], t0())
        .await
        .unwrap();
    // Listening from now on: the insert's own notifications are not heard.
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
    listener.listen(store::postgres::CHANNEL).await.unwrap();
    let leased = s
        .task_lease_available(&LeaseParams {
            queues: vec!["x".into(), "y".into()],
            ..lease_params("x", 1, t0())
        })
        .await
        .unwrap();
    assert_eq!(leased[0].id, uuid_like(1));
    let n = tokio::time::timeout(Duration::from_secs(20), listener.recv())
        .await
        .expect("the untaken row's queue was announced")
        .unwrap();
    assert_eq!(n.payload(), "y");
}

/// On MySQL the same: a lease that locked rows it did not take advances the
/// event counter past its events, and another replica's poller then wakes every
/// queue (it cannot know which rows were skipped while locked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_locked_but_not_taken_wake_every_queue_on_mysql() {
    let Some((s, db)) = open(Backend::Mysql).await else {
        return;
    };
    let high = NewTask {
        priority: 5,
        ..task("x", 1)
    };
    s.task_insert_many(&[high, task("y", 2)], t0())
        .await
        .unwrap();
    // Another replica's store and its poller, recording what it wakes.
    let other = store::connect(&db.url, 2).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<String>>();
    let stop = tokio_util::sync::CancellationToken::new();
    other.spawn_listener(
        Arc::new(move |q: Option<&str>| {
            let _ = tx.send(q.map(str::to_owned));
        }),
        stop.clone(),
    );
    // The poller wakes every queue once as it starts: wait for that first.
    let first = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .unwrap();
    assert_eq!(first, Some(None));
    let leased = s
        .task_lease_available(&LeaseParams {
            queues: vec!["x".into(), "y".into()],
            ..lease_params("x", 1, t0())
        })
        .await
        .unwrap();
    assert_eq!(leased[0].id, uuid_like(1));
    let woken = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the other replica woke")
        .unwrap();
    assert_eq!(woken, None, "every queue");
    stop.cancel();
}

// Insert, lease, settle and list, by the clock each call is given.
#[path = "store_conformance/insert_lease.rs"]
mod insert_lease;
// A stale holder refused beside the live one, and the lease reply budget.
#[path = "store_conformance/fencing.rs"]
mod fencing;
// Attempt counts per bucket, dead-letter groups and lease holders, as the console reads them.
#[path = "store_conformance/console_reads.rs"]
mod console_reads;
