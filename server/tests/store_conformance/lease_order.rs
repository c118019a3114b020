//! The plain lease over several queues (SQLite merges the queues'
//! candidates in Rust instead of SQL): one call takes tasks in lease order across
//! all its queues, cuts at `max_tasks` and at the reply budget, and leaves the
//! rest READY.

use taskbroker_server::store::{LeaseParams, NewTask};

use super::{lease_params, open, t0, task, uuid_like};
use crate::common::Backend;

pub async fn one_lease_takes_tasks_in_lease_order_across_queues(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let secs = |n| Some(t0() + chrono::Duration::seconds(n));
    let with = |queue: &str, n, priority, deadline, run_at_secs_ago: i64| NewTask {
        priority,
        deadline,
        run_at: t0() - chrono::Duration::seconds(run_at_secs_ago),
        ..task(queue, n)
    };
    s.task_insert_many(
        &[
            with("a", 1, 5, secs(100), 0),
            with("b", 2, 5, secs(50), 0),
            with("b", 3, 5, None, 0),
            with("a", 4, 9, None, 0),
            with("c", 5, 0, None, 0),
            with("c", 6, 5, None, 10),
            with("a", 7, 0, None, 0),
        ],
        t0(),
    )
    .await
    .unwrap();
    let over = |max, bytes| LeaseParams {
        queues: vec!["a".into(), "b".into(), "c".into()],
        max_reply_bytes: bytes,
        ..lease_params("a", max, t0())
    };
    let ids = |got: Vec<taskbroker_server::store::TaskRecord>| {
        got.into_iter().map(|t| t.id).collect::<Vec<_>>()
    };
    // Priority first; then the earliest deadline, none last; then the earliest
    // run time; then submission order.
    let first = s.task_lease_available(&over(4, 4 << 20)).await.unwrap();
    assert_eq!(
        ids(first),
        [uuid_like(4), uuid_like(2), uuid_like(1), uuid_like(6)]
    );
    // A budget of about one task's reply (its fixed part and a hundred
    // bytes of fields): the first task in order, alone.
    let one = taskbroker_server::domain::reply::TASK_FIXED_BYTES.unsigned_abs() + 100;
    let second = s.task_lease_available(&over(10, one)).await.unwrap();
    assert_eq!(ids(second), [uuid_like(3)]);
    let rest = s.task_lease_available(&over(10, 4 << 20)).await.unwrap();
    assert_eq!(ids(rest), [uuid_like(5), uuid_like(7)]);
    assert!(
        s.task_lease_available(&over(10, 4 << 20))
            .await
            .unwrap()
            .is_empty()
    );
}
