//! The calls the benchmark makes, on the generated stubs: connections, Submit,
//! Lease and Complete with small bounded retries, and the error tally of a phase.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use taskbroker_client::pb::{
    CompleteManyRequest, CompleteOutcome, CompleteRequest, LeaseRequest, LeasedTask, SubmitRequest,
    Target, TaskSpec,
};
use taskbroker_client::time::to_proto_duration;
use tonic::transport::{Channel, Endpoint};

pub type Broker = BrokerServiceClient<Channel>;

/// How long a waiting worker's Lease long-polls before asking again.
pub const LEASE_WAIT: Duration = Duration::from_secs(5);
/// Long enough that no task is reclaimed during a run.
const LEASE_DURATION: Duration = Duration::from_secs(120);
const SUBMIT_ATTEMPTS: u32 = 5;
const COMPLETE_ATTEMPTS: u32 = 3;
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Prost's default decoding limit is 4 MiB; a Lease of 256 big payloads can exceed it.
const MAX_MESSAGE_BYTES: usize = 512 * 1024 * 1024;

/// Opens `n` connections: each is its own HTTP/2 connection (tonic Channel), so
/// the load spreads over as many streams and server tasks as a real fleet's would.
/// Connection `i` goes to `addrs[i % addrs.len()]` (several broker replicas).
pub async fn connect_many(addrs: &[String], n: usize) -> anyhow::Result<Vec<Broker>> {
    anyhow::ensure!(!addrs.is_empty(), "no broker address");
    let endpoints = addrs
        .iter()
        .map(|addr| {
            Ok(Endpoint::from_shared(addr.clone())?
                .connect_timeout(Duration::from_secs(5))
                .tcp_nodelay(true))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let channels = futures::future::try_join_all((0..n).map(|i| {
        let endpoint = endpoints[i % endpoints.len()].clone();
        async move { endpoint.connect().await }
    }))
    .await?;
    Ok(channels
        .into_iter()
        .map(|c| {
            BrokerServiceClient::new(c)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
        })
        .collect())
}

/// Errors seen during a phase: counted, and the first one kept for the report.
#[derive(Default)]
pub struct Errors {
    count: AtomicU64,
    first: Mutex<Option<String>>,
}

impl Errors {
    pub fn record(&self, call: &str, status: &tonic::Status) {
        if self.count.fetch_add(1, Ordering::Relaxed) == 0 {
            // Poisoning needs a panic while holding the lock, which this never does.
            *self.first.lock().expect("errors lock") =
                Some(format!("{call}: {:?} {}", status.code(), status.message()));
        }
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn first(&self) -> Option<String> {
        self.first.lock().expect("errors lock").clone()
    }
}

/// `--targeted`: tasks carry a label target and workers the labels (routing).
static TARGETED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_targeted(on: bool) {
    TARGETED.store(on, Ordering::Relaxed);
}

/// `--keyed`: every task carries an idempotency key of its own.
static KEYED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn set_keyed(on: bool) {
    KEYED.store(on, Ordering::Relaxed);
}

fn pairs(p: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A task of `queue` with `payload` and the broker's defaults for everything else.
pub fn spec(queue: &str, payload: Vec<u8>) -> TaskSpec {
    let target = TARGETED.load(Ordering::Relaxed).then(|| Target {
        worker_id: String::new(),
        labels: pairs(&[("gpu", "a100"), ("region", "eu")]),
    });
    let key = if KEYED.load(Ordering::Relaxed) {
        format!("k{}", NEXT_KEY.fetch_add(1, Ordering::Relaxed))
    } else {
        String::new()
    };
    TaskSpec {
        queue: queue.to_string(),
        payload,
        target,
        key,
        concurrency_key: crate::admission::next_key(),
        ..Default::default()
    }
}

/// Submits one batch, retrying a failed call a few times (all-or-nothing on the
/// broker, so a retry cannot duplicate part of it).
pub async fn submit(
    client: &mut Broker,
    tasks: Vec<TaskSpec>,
    errors: &Errors,
) -> anyhow::Result<Vec<String>> {
    let mut attempt = 0;
    loop {
        let request = SubmitRequest {
            tasks: tasks.clone(),
        };
        match client.submit(request).await {
            Ok(reply) => {
                return Ok(reply
                    .into_inner()
                    .results
                    .into_iter()
                    .map(|r| r.task_id)
                    .collect());
            }
            Err(status) => {
                errors.record("Submit", &status);
                attempt += 1;
                if attempt >= SUBMIT_ATTEMPTS {
                    anyhow::bail!("Submit failed {attempt} times: {status}");
                }
                tokio::time::sleep(RETRY_PAUSE * attempt).await;
            }
        }
    }
}

/// Settles carry `lease_next` unless `--no-lease-next`.
static LEASE_NEXT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub fn set_lease_next(on: bool) {
    LEASE_NEXT.store(on, Ordering::Relaxed);
}

/// The `lease_next` of a settle: up to `max_tasks` of `queue`, no wait (the worker
/// falls back to its long-poll Lease when none comes back); None when turned off.
pub fn lease_next(worker_id: &str, queue: &str, max_tasks: u32) -> Option<LeaseRequest> {
    LEASE_NEXT.load(Ordering::Relaxed).then(|| LeaseRequest {
        wait: None,
        ..lease_message(worker_id, queue, max_tasks)
    })
}

fn lease_message(worker_id: &str, queue: &str, max_tasks: u32) -> LeaseRequest {
    let labels = if TARGETED.load(Ordering::Relaxed) {
        pairs(&[("gpu", "a100"), ("region", "eu"), ("rack", "r7")])
    } else {
        Default::default()
    };
    LeaseRequest {
        labels,
        worker_id: worker_id.to_string(),
        queues: vec![queue.to_string()],
        max_tasks,
        lease_duration: Some(to_proto_duration(LEASE_DURATION)),
        wait: Some(to_proto_duration(LEASE_WAIT)),
    }
}

/// A long-poll Lease of up to `max_tasks` tasks of `queue`.
pub fn lease_request(worker_id: &str, queue: &str, max_tasks: u32) -> tonic::Request<LeaseRequest> {
    let mut request = tonic::Request::new(lease_message(worker_id, queue, max_tasks));
    // The deadline leaves room for the broker's empty answer after the wait.
    request.set_timeout(LEASE_WAIT + Duration::from_secs(5));
    request
}

/// Completes a leased task with an empty result; true when the broker acknowledged,
/// with the tasks leased for `lease_next`.
pub async fn complete(
    client: &mut Broker,
    task: &LeasedTask,
    errors: &Errors,
    lease_next: Option<LeaseRequest>,
) -> (bool, Vec<LeasedTask>) {
    for attempt in 1..=COMPLETE_ATTEMPTS {
        let request = CompleteRequest {
            task_id: task.task_id.clone(),
            lease_token: task.lease_token.clone(),
            result: Vec::new(),
            lease_next: lease_next.clone(),
        };
        match client.complete(request).await {
            Ok(reply) => return (true, reply.into_inner().next_tasks),
            Err(status) => {
                errors.record("Complete", &status);
                tokio::time::sleep(RETRY_PAUSE * attempt).await;
            }
        }
    }
    (false, Vec::new())
}

/// Completes leased tasks with empty results in one CompleteMany call; returns how
/// many the broker acknowledged as completed, and the tasks leased for `lease_next`.
pub async fn complete_many(
    client: &mut Broker,
    tasks: &[LeasedTask],
    errors: &Errors,
    lease_next: Option<LeaseRequest>,
) -> (usize, Vec<LeasedTask>) {
    let request = CompleteManyRequest {
        completions: tasks
            .iter()
            .map(|t| CompleteRequest {
                task_id: t.task_id.clone(),
                lease_token: t.lease_token.clone(),
                result: Vec::new(),
                lease_next: None,
            })
            .collect(),
        lease_next,
    };
    for attempt in 1..=COMPLETE_ATTEMPTS {
        match client.complete_many(request.clone()).await {
            Ok(reply) => {
                let reply = reply.into_inner();
                let results = reply.results;
                let completed = results
                    .iter()
                    .filter(|r| r.outcome() == CompleteOutcome::Completed)
                    .count();
                for r in results
                    .iter()
                    .filter(|r| r.outcome() != CompleteOutcome::Completed)
                {
                    let status = tonic::Status::aborted(format!("{:?}", r.outcome()));
                    errors.record("CompleteMany", &status);
                }
                return (completed, reply.next_tasks);
            }
            Err(status) => {
                errors.record("CompleteMany", &status);
                tokio::time::sleep(RETRY_PAUSE * attempt).await;
            }
        }
    }
    (0, Vec::new())
}
