//! Dependencies: chains, diamonds, failures cascading and dependencies finished at submit.

use super::*;

/// 10,000 tasks in a chain: each becomes ready only when the one before it
/// succeeded; each completion touches only its one dependent.
async fn a_chain_of_ten_thousand_runs_in_order(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    const N: usize = 10_000;
    for start in (0..N).step_by(1000) {
        let tasks: Vec<NewTask> = (start..start + 1000).map(|n| task("chain", n)).collect();
        let flows: Vec<FlowSpec> = (start..start + 1000)
            .map(|n| match n {
                0 => FlowSpec::default(),
                n if n == start => after(&[n - 1]),
                n => FlowSpec {
                    depends_on_index: vec![n - start - 1],
                    ..Default::default()
                },
            })
            .collect();
        insert(&s, &tasks, &flows).await;
    }
    assert_eq!(get(&s, 1).await.state, StoredState::Blocked);
    let info = s.task_flow_info(&[id(1001)]).await.unwrap();
    assert_eq!(info[&id(1001)].depends_on, [id(1000)]);
    assert_eq!(info[&id(1001)].deps_remaining, 1);
    for n in 0..N {
        let now = at(n as i64);
        let leased = s
            .task_lease_available(&lease("chain", 10, now))
            .await
            .unwrap();
        assert_eq!(leased.len(), 1, "exactly one ready at step {n}");
        assert_eq!(leased[0].id, id(n));
        complete_all(&s, &leased, now).await;
    }
    assert_eq!(get(&s, N - 1).await.state, StoredState::Succeeded);
}

/// A root, 9,998 tasks that wait for it, and a sink that waits for all of them.
async fn a_diamond_of_ten_thousand_joins_once(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    const MIDDLE: usize = 9_998;
    insert(&s, &[task("d", 0)], &[FlowSpec::default()]).await;
    for start in (1..=MIDDLE).step_by(1000) {
        let end = (start + 1000).min(MIDDLE + 1);
        let tasks: Vec<NewTask> = (start..end).map(|n| task("d", n)).collect();
        let flows: Vec<FlowSpec> = (start..end).map(|_| after(&[0])).collect();
        insert(&s, &tasks, &flows).await;
    }
    let sink = MIDDLE + 1;
    let all: Vec<usize> = (1..=MIDDLE).collect();
    insert(&s, &[task("sink", sink)], &[after(&all)]).await;
    assert_eq!(get(&s, sink).await.state, StoredState::Blocked);
    let root = s.task_lease_available(&lease("d", 1, t0())).await.unwrap();
    complete_all(&s, &root, t0()).await;
    let mut done = 0;
    loop {
        let leased = s
            .task_lease_available(&lease("d", 256, at(1)))
            .await
            .unwrap();
        if leased.is_empty() {
            break;
        }
        done += leased.len();
        if done == MIDDLE {
            let info = s.task_flow_info(&[id(sink)]).await.unwrap();
            assert_eq!(info[&id(sink)].deps_remaining, leased.len() as u32);
            assert_eq!(get(&s, sink).await.state, StoredState::Blocked);
        }
        complete_all(&s, &leased, at(1)).await;
    }
    assert_eq!(done, MIDDLE);
    let t = get(&s, sink).await;
    assert_eq!(t.state, StoredState::Pending, "the sink unblocked");
    let leased = s
        .task_lease_available(&lease("sink", 1, at(2)))
        .await
        .unwrap();
    assert_eq!(leased[0].id, id(sink));
}

/// A failed head cancels a chain of 10,000 (DEPENDENCY_FAILED), except a task that
/// runs anyway; that one's own dependents then wait for it as usual.
async fn a_failed_dependency_cancels_its_dependents_transitively(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    const N: usize = 10_000;
    for start in (0..N).step_by(1000) {
        let tasks: Vec<NewTask> = (start..start + 1000).map(|n| task("f", n)).collect();
        let flows: Vec<FlowSpec> = (start..start + 1000)
            .map(|n| {
                if n == 0 {
                    FlowSpec::default()
                } else {
                    after(&[n - 1])
                }
            })
            .collect();
        insert(&s, &tasks, &flows).await;
    }
    // Beside the chain: one that runs anyway, and one that waits for it.
    let anyway = FlowSpec {
        run_if_dependency_fails: true,
        ..after(&[5])
    };
    insert(
        &s,
        &[task("g", N), task("g", N + 1)],
        &[anyway, after(&[N])],
    )
    .await;
    let head = s.task_lease_available(&lease("f", 1, t0())).await.unwrap();
    fail_for_good(&s, &head[0], at(1)).await;
    assert_eq!(get(&s, 0).await.state, StoredState::Dead);
    for n in [1, 2, 5, 5000, N - 1] {
        let t = get(&s, n).await;
        assert_eq!(t.state, StoredState::Cancelled, "task {n}");
        assert_eq!(t.last_error.as_deref(), Some("DEPENDENCY_FAILED"));
        assert_eq!(t.finished_at, Some(at(1)));
    }
    let info = s.task_flow_info(&[id(7)]).await.unwrap();
    assert_eq!(
        info[&id(7)].cancel_reason.as_deref(),
        Some("dependency_failed")
    );
    let cancelled = s
        .task_select(&BulkFilter {
            queue: "f".into(),
            states: vec![TaskState::Cancelled],
            limit: 100_000,
            now: at(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(cancelled.len(), N - 1);
    assert_eq!(get(&s, N).await.state, StoredState::Pending, "runs anyway");
    assert_eq!(get(&s, N + 1).await.state, StoredState::Blocked);
    let g = s.task_lease_available(&lease("g", 5, at(2))).await.unwrap();
    assert_eq!(g.len(), 1);
    complete_all(&s, &g, at(3)).await;
    assert_eq!(get(&s, N + 1).await.state, StoredState::Pending);
}

/// A dependency that finished before the dependent was submitted counts at once.
async fn finished_dependencies_count_at_submit(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    insert(
        &s,
        &[task("q", 1), task("q", 2)],
        &[FlowSpec::default(), FlowSpec::default()],
    )
    .await;
    let l = s.task_lease_available(&lease("q", 2, t0())).await.unwrap();
    let (ok, bad) = if l[0].id == id(1) {
        (&l[0], &l[1])
    } else {
        (&l[1], &l[0])
    };
    complete_all(&s, std::slice::from_ref(ok), at(1)).await;
    fail_for_good(&s, bad, at(1)).await;
    insert(
        &s,
        &[task("r", 3), task("r", 4), task("r", 5)],
        &[
            after(&[1]),
            after(&[1, 2]),
            FlowSpec {
                run_if_dependency_fails: true,
                ..after(&[2])
            },
        ],
    )
    .await;
    assert_eq!(get(&s, 3).await.state, StoredState::Pending);
    let four = get(&s, 4).await;
    assert_eq!(four.state, StoredState::Cancelled);
    assert_eq!(four.last_error.as_deref(), Some("DEPENDENCY_FAILED"));
    assert_eq!(get(&s, 5).await.state, StoredState::Pending);
    // An unknown id inserts nothing of the batch.
    let r = s
        .task_insert_flow(
            &[task("r", 6), task("r", 7)],
            &[FlowSpec::default(), after(&[1, 999])],
            t0(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r, FlowInserted::UnknownDependency { task: 1, dep: 1 });
    assert!(s.task_get(&id(6)).await.unwrap().is_none());
}

all_backends!(
    a_chain_of_ten_thousand_runs_in_order,
    a_diamond_of_ten_thousand_joins_once,
    a_failed_dependency_cancels_its_dependents_transitively,
    finished_dependencies_count_at_submit
);
