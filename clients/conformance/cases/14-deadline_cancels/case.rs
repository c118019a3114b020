//! The `deadline_cancels` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::{CancelReason, Client, TaskContext, TaskError, TaskSpec};
use tokio::sync::oneshot;

use crate::spec::worker;
use crate::{Outcome, at, check};

pub(crate) async fn deadline_cancels(c: Client, q: String) -> Outcome {
    at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), Vec::new()).deadline_in(Duration::from_secs(2)))
            .await,
    )?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Option<CancelReason>>(1);
    let w = worker(&c, &q)
        .queue(q.clone(), move |ctx: TaskContext| {
            let tx = tx.clone();
            async move {
                let _ = tokio::time::timeout(Duration::from_secs(20), ctx.cancelled()).await;
                let _ = tx.send(ctx.cancel_reason()).await;
                Err::<(), _>(TaskError::retry("cancelled"))
            }
        })
        .build();
    let (stop, stopped) = oneshot::channel::<()>();
    let run = tokio::spawn(w.run(async {
        let _ = stopped.await;
    }));
    let mut rx = rx;
    let got = tokio::time::timeout(Duration::from_secs(25), rx.recv()).await;
    let _ = stop.send(());
    let _ = run.await;
    let reason = got.map_err(|_| "the handler never ran".to_string())?;
    check(
        reason == Some(Some(CancelReason::Deadline)),
        format!("cancel reason {reason:?}, want Deadline"),
    )
}
