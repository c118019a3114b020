//! Completions share calls. An attempt that succeeded hands its Complete to the
//! worker's completer; while one call is in flight the next ones queue, and the
//! completer sends all that queued in one CompleteMany (one call, one database
//! statement on the broker for the lot). Alone, a completion is sent at once, as a
//! plain Complete, so batching adds no latency when the worker is quiet.
//!
//! Each completion gets the answer its own Complete would have had. If the broker
//! refuses the batch as a whole (a result over its size limit, or a broker that
//! predates CompleteMany), every completion of it is sent on its own instead.
//!
//! lease_next: a completion may ask for its slot's next task
//! (`lease_next`, max_tasks 1). A batch asks once, for as many tasks as its
//! completions asked for, and hands them out in order, one per asking completion.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::join_all;
use tokio::sync::{broadcast, mpsc, oneshot};
use tonic::Code;

use super::event::WorkerEvent;
use super::metrics::{Metrics, Rpc};

use crate::error::LEASE_LOST;
use crate::{Client, Error, pb};

/// Completions per call at most (the broker accepts up to 1000).
const MAX_BATCH: usize = 256;
/// Result bytes per call at most, well under the default 4 MiB message limit.
const MAX_BATCH_BYTES: usize = 1024 * 1024;

struct Item {
    req: pb::CompleteRequest,
    reply: oneshot::Sender<Settled>,
}

/// The answer for one completion: Complete's, and the tasks leased for its slot
/// (given even when the completion itself lost its lease, so none is dropped).
pub(crate) struct Settled {
    pub(crate) result: Result<(), Error>,
    pub(crate) next: Vec<pb::LeasedTask>,
}

impl Settled {
    fn alone(r: Result<Vec<pb::LeasedTask>, Error>) -> Self {
        match r {
            Ok(next) => Settled {
                result: Ok(()),
                next,
            },
            Err(e) => Settled {
                result: Err(e),
                next: Vec::new(),
            },
        }
    }
}

/// Cheap to clone; the sending task ends when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct Completer {
    client: Client,
    items: mpsc::UnboundedSender<Item>,
    /// Completions sent to the completer and not yet taken into a call.
    queued: Arc<AtomicUsize>,
    events: broadcast::Sender<WorkerEvent>,
    metrics: Metrics,
}

/// The completer task's side.
struct Sender {
    client: Client,
    queued: Arc<AtomicUsize>,
    metrics: Metrics,
}

impl Completer {
    pub(crate) fn start(
        client: Client,
        metrics: Metrics,
        events: broadcast::Sender<WorkerEvent>,
    ) -> Self {
        let (items, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let sender = Sender {
            client: client.clone(),
            queued: queued.clone(),
            metrics: metrics.clone(),
        };
        tokio::spawn(run(sender, rx));
        Completer {
            client,
            items,
            queued,
            events,
            metrics,
        }
    }

    /// Completes one task; the answer is that of a Complete call for it.
    pub(crate) async fn complete(&self, req: pb::CompleteRequest) -> Settled {
        let (reply, answer) = oneshot::channel();
        let queued = self.queued.fetch_add(1, Ordering::SeqCst) + 1;
        if let Err(mpsc::error::SendError(item)) = self.items.send(Item { req, reply }) {
            // The sending task is gone (the runtime is shutting down): send it here.
            self.queued.fetch_sub(1, Ordering::SeqCst);
            self.metrics.settle_call(Rpc::Complete);
            return Settled::alone(self.client.complete_and_lease(item.req).await);
        }
        let _ = self.events.send(WorkerEvent::SettleQueued { queued });
        match answer.await {
            Ok(settled) => settled,
            Err(_) => Settled::alone(Err(Error::from(tonic::Status::unavailable(
                "the worker's completer stopped",
            )))),
        }
    }
}

async fn run(sender: Sender, mut rx: mpsc::UnboundedReceiver<Item>) {
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
        sender.queued.fetch_sub(batch.len(), Ordering::SeqCst);
        send(&sender, batch).await;
    }
}

async fn send(sender: &Sender, mut batch: Vec<Item>) {
    let client = &sender.client;
    if batch.len() == 1 {
        let item = batch.remove(0);
        sender.metrics.settle_call(Rpc::Complete);
        let settled = Settled::alone(client.complete_and_lease(item.req).await);
        let _ = item.reply.send(settled);
        return;
    }
    // One lease_next for the batch, for as many tasks as its completions asked for.
    let asking = batch.iter().filter(|i| i.req.lease_next.is_some()).count();
    let lease_next = batch
        .iter()
        .find_map(|i| i.req.lease_next.clone())
        .map(|l| pb::LeaseRequest {
            max_tasks: asking as u32,
            ..l
        });
    let req = pb::CompleteManyRequest {
        completions: batch
            .iter()
            .map(|i| pb::CompleteRequest {
                lease_next: None,
                ..i.req.clone()
            })
            .collect(),
        lease_next,
    };
    sender.metrics.settle_call(Rpc::CompleteMany);
    match client.complete_many_and_lease(req).await {
        Ok((results, next)) if results.len() == batch.len() => {
            let mut next = next.into_iter();
            for (item, r) in batch.into_iter().zip(results) {
                let next = match item.req.lease_next {
                    Some(_) => next.next().into_iter().collect(),
                    None => Vec::new(),
                };
                let result = outcome(&item.req.task_id, r.outcome());
                let _ = item.reply.send(Settled { result, next });
            }
            for t in next {
                tracing::error!(task_id = %t.task_id, "the broker returned more tasks than asked for");
            }
        }
        // Refused as a whole, or answered oddly: each on its own, as Complete.
        Ok((_, next)) => {
            for t in next {
                tracing::error!(task_id = %t.task_id, "a malformed CompleteMany answer; its lease will expire");
            }
            one_by_one(sender, batch).await
        }
        Err(_) => one_by_one(sender, batch).await,
    }
}

async fn one_by_one(sender: &Sender, batch: Vec<Item>) {
    let client = &sender.client;
    join_all(batch.into_iter().map(|item| async move {
        sender.metrics.settle_call(Rpc::Complete);
        let settled = Settled::alone(client.complete_and_lease(item.req).await);
        let _ = item.reply.send(settled);
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
