//! The Worker shared by the client-library cases (docs/client-spec.md points 1 to 7,
//! clients/conformance/cases/): one no-op handler on the case's queue, a 1 s poll wait.

use std::time::Duration;

use taskbroker_client::worker;
use taskbroker_client::{Client, TaskContext, TaskError, Worker};

use super::WORKER_ID;

pub(crate) fn worker(c: &Client, q: &str) -> worker::WorkerBuilder {
    Worker::builder(c.clone())
        .worker_id(WORKER_ID)
        .lease_wait(Duration::from_secs(1))
        .queue(q, |_ctx: TaskContext| async { Ok::<_, TaskError>(()) })
}
