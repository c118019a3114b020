//! The Rust worker runtime's cooldowns: a handler that fails with
//! `TaskError::cool_down_key` (a 429's Retry-After) holds its task's
//! concurrency key on the broker, and the task's retry waits as long.

mod common;

use std::time::Duration;

use common::{Backend, spawn_app};
use taskbroker_client::worker::WorkerEvent;
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec, Worker};

async fn a_handler_cools_its_key_down(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let c = Client::connect(app.url()).await.expect("client connects");
    let limited = |_ctx: TaskContext| async move {
        Err::<Vec<u8>, _>(
            TaskError::retry("429 Too Many Requests").cool_down_key(Duration::from_secs(90)),
        )
    };
    let worker = Worker::builder(c.clone()).queue("calls", limited).build();
    let mut events = worker.subscribe();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(worker.run(async move {
        let _ = stopped.await;
    }));
    let id = c
        .submit(TaskSpec::new("calls", "x").concurrency_key("acme"))
        .await
        .expect("submit")
        .task_id;
    // The attempt's end, as the runtime reports it once its Fail is answered.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let e = tokio::time::timeout_at(give_up, events.recv())
            .await
            .expect("the attempt ends")
            .expect("events");
        if matches!(e, WorkerEvent::Finished { .. }) {
            break;
        }
    }
    let cooldowns = c.list_cooldowns(None, None).await.expect("list");
    assert_eq!(cooldowns.len(), 1, "{cooldowns:?}");
    assert_eq!(cooldowns[0].queue, "calls");
    assert_eq!(cooldowns[0].concurrency_key, "acme");
    assert_eq!(cooldowns[0].task_id, id);
    let until = cooldowns[0].until.expect("until");
    let task = c.get_task(&id).await.expect("task");
    assert!(task.run_at.expect("run_at").seconds >= until.seconds);
    let _ = stop.send(());
    handle.await.expect("no panic").expect("the worker stops");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_cools_its_key_down_on_sqlite() {
    a_handler_cools_its_key_down(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_cools_its_key_down_on_postgres() {
    a_handler_cools_its_key_down(Backend::Postgres).await;
}
