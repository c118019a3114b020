//! The `typed_handlers` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use taskbroker_client::pb::TaskState;
use taskbroker_client::worker::Next;
use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec, Worker};

use crate::meter::Readings;
use crate::{Outcome, WORKER_ID, at, check};

#[derive(Debug, Deserialize)]
struct Email {
    to: String,
    n: i64,
}

#[derive(Debug, Deserialize)]
struct Count {
    n: i64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Done {
    ok: bool,
    n: i64,
}

pub(crate) async fn typed_handlers(c: Client, q: String) -> Outcome {
    let qa = q.replace(".typed_handlers.", ".typed_a.");
    let qb = q.replace(".typed_handlers.", ".typed_b.");
    let readings = Readings::new();
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let recorded = seen.clone();
    let w = Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .lease_wait(Duration::from_secs(1))
        .meter(readings.meter())
        .middleware(move |ctx: TaskContext, next: Next| {
            let recorded = recorded.clone();
            async move {
                let queue = ctx.queue().to_string();
                let out = next.run(ctx).await;
                recorded.lock().unwrap().push((queue, out.is_ok()));
                out
            }
        })
        .queue_json(&qa, |_ctx, e: Email| async move {
            if e.to != "a@example.com" {
                return Err(TaskError::permanent(format!("to is {:?}", e.to)));
            }
            Ok::<_, TaskError>(Done { ok: true, n: e.n })
        })
        .queue_json(&qb, |_ctx, e: Count| async move {
            Ok::<_, TaskError>(Done { ok: true, n: e.n })
        })
        .build();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(w.run(async move {
        let _ = stopped.await;
    }));
    let outcome = async {
        let a = at(
            "Submit A",
            c.submit_json(&qa, &serde_json::json!({"to": "a@example.com", "n": 1}))
                .await,
        )?
        .task_id;
        let b = at(
            "Submit B",
            c.submit_json(&qb, &serde_json::json!({"n": 2})).await,
        )?
        .task_id;
        let bad = at(
            "Submit bad",
            c.submit(TaskSpec::new(qa.clone(), b"not json".to_vec()))
                .await,
        )?
        .task_id;
        for (id, n) in [(&a, 1), (&b, 2)] {
            let result = at("wait", c.wait(id, Duration::from_secs(20)).await)?;
            let done: Done = serde_json::from_slice(&result)
                .map_err(|e| format!("result of {id} is not a Done: {e}"))?;
            check(
                done == Done { ok: true, n },
                format!("result {done:?}, want ok n={n}"),
            )?;
        }
        let _ = c.wait(&bad, Duration::from_secs(20)).await;
        let t = at("GetTask", c.get_task(&bad).await)?;
        check(
            t.state() == TaskState::Dead && t.last_error.contains("Email"),
            format!(
                "the undecodable task is {:?} with error {:?}, want DEAD naming Email",
                t.state(),
                t.last_error
            ),
        )?;
        let mut saw = seen.lock().unwrap().clone();
        saw.sort();
        let mut want = vec![(qa.clone(), true), (qa.clone(), false), (qb.clone(), true)];
        want.sort();
        check(
            saw == want,
            format!("the middleware saw {saw:?}, want {want:?}"),
        )?;
        for queue in [&qa, &qb] {
            let n = readings.count(
                "taskbroker.worker.tasks",
                &[("queue", queue), ("outcome", "succeeded")],
            );
            check(
                n == 1,
                format!("{n} succeeded tasks counted for {queue}, want 1"),
            )?;
        }
        // The conventional instrument: every delivery, the failed one with its error type.
        for (queue, want) in [(&qa, 2), (&qb, 1)] {
            let n = readings.count(
                "messaging.client.consumed.messages",
                &[("messaging.destination.name", queue)],
            );
            check(
                n == want,
                format!("{n} consumed messages counted for {queue}, want {want}"),
            )?;
        }
        let n = readings.count(
            "messaging.client.consumed.messages",
            &[
                ("messaging.destination.name", &qa),
                ("error.type", "failed"),
            ],
        );
        check(
            n == 1,
            format!("{n} failed deliveries counted for {qa}, want 1"),
        )?;
        Ok(())
    }
    .await;
    let _ = stop.send(());
    let ran = running.await.map_err(|e| e.to_string())?;
    outcome.and(at("Worker::run", ran))
}
