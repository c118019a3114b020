//! Completions share calls. An attempt that succeeded hands its Complete to the
//! worker's completer; while one call is in flight the next ones queue, and the
//! completer sends all that queued in one CompleteMany (one call, one database
//! statement on the broker for the lot). Alone, a completion is sent at once, as a
//! plain Complete, so batching adds no latency when the worker is quiet.
//!
//! Each completion gets the answer its own Complete would have had. If the broker
//! refuses the batch as a whole (a result over its size limit, or a broker that
//! predates CompleteMany), every completion of it is sent on its own instead.

use futures::future::join_all;
use tokio::sync::{mpsc, oneshot};
use tonic::Code;

use crate::error::LEASE_LOST;
use crate::{Client, Error, pb};

/// Completions per call at most (the broker accepts up to 1000).
const MAX_BATCH: usize = 256;
/// Result bytes per call at most, well under the default 4 MiB message limit.
const MAX_BATCH_BYTES: usize = 1024 * 1024;

struct Item {
    req: pb::CompleteRequest,
    reply: oneshot::Sender<Result<(), Error>>,
}

/// Cheap to clone; the sending task ends when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct Completer {
    client: Client,
    items: mpsc::UnboundedSender<Item>,
}

impl Completer {
    pub(crate) fn start(client: Client) -> Self {
        let (items, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(client.clone(), rx));
        Completer { client, items }
    }

    /// Completes one task; the answer is that of a Complete call for it.
    pub(crate) async fn complete(&self, req: pb::CompleteRequest) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError(item)) = self.items.send(Item { req, reply }) {
            // The sending task is gone (the runtime is shutting down): send it here.
            return self.client.complete(item.req).await;
        }
        match answer.await {
            Ok(result) => result,
            Err(_) => Err(Error::from(tonic::Status::unavailable(
                "the worker's completer stopped",
            ))),
        }
    }
}

async fn run(client: Client, mut rx: mpsc::UnboundedReceiver<Item>) {
    while let Some(first) = rx.recv().await {
        let mut bytes = first.req.result.len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(item) => {
                    bytes += item.req.result.len();
                    batch.push(item);
                }
                Err(_) => break,
            }
        }
        send(&client, batch).await;
    }
}

async fn send(client: &Client, mut batch: Vec<Item>) {
    if batch.len() == 1 {
        let item = batch.remove(0);
        let _ = item.reply.send(client.complete(item.req).await);
        return;
    }
    let req = pb::CompleteManyRequest {
        completions: batch.iter().map(|i| i.req.clone()).collect(),
        lease_next: None,
    };
    match client.complete_many(req).await {
        Ok(results) if results.len() == batch.len() => {
            for (item, r) in batch.into_iter().zip(results) {
                let _ = item.reply.send(outcome(&item.req.task_id, r.outcome()));
            }
        }
        // Refused as a whole, or answered oddly: each on its own, as Complete.
        Ok(_) | Err(_) => one_by_one(client, batch).await,
    }
}

async fn one_by_one(client: &Client, batch: Vec<Item>) {
    join_all(batch.into_iter().map(|item| async move {
        let _ = item.reply.send(client.complete(item.req).await);
    }))
    .await;
}

/// The error Complete would have answered with, for one task of CompleteMany.
fn outcome(task_id: &str, o: pb::CompleteOutcome) -> Result<(), Error> {
    let (code, message, reason) = match o {
        pb::CompleteOutcome::Completed => return Ok(()),
        pb::CompleteOutcome::LeaseLost => (
            Code::Aborted,
            format!("the lease of task {task_id} is no longer held"),
            Some(LEASE_LOST.to_string()),
        ),
        pb::CompleteOutcome::NotFound => {
            (Code::NotFound, format!("task {task_id} not found"), None)
        }
        pb::CompleteOutcome::Unspecified => return Err(Error::Malformed("CompleteResult.outcome")),
    };
    Err(Error::Status {
        code,
        status: Box::new(tonic::Status::new(code, message.clone())),
        message,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_the_errors_complete_gives() {
        assert!(outcome("t", pb::CompleteOutcome::Completed).is_ok());
        assert!(
            outcome("t", pb::CompleteOutcome::LeaseLost)
                .unwrap_err()
                .is_lease_lost()
        );
        let missing = outcome("t", pb::CompleteOutcome::NotFound).unwrap_err();
        assert_eq!(missing.code(), Some(Code::NotFound));
        assert!(!missing.is_lease_lost());
        assert!(matches!(
            outcome("t", pb::CompleteOutcome::Unspecified),
            Err(Error::Malformed(_))
        ));
    }
}
