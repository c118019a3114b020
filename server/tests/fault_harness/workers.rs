//! The fault tests' workers: lease through whichever replica answers, fail or
//! complete as their plan says, record what the broker acknowledged in the ledger.

use super::*;

/// How a worker treats the tasks it leases.
#[derive(Clone, Copy)]
pub struct WorkerPlan {
    /// Fail each task's first `fail_first` attempts (with `retry_after` = 1 ms).
    pub fail_first: u32,
    pub lease: Duration,
    pub max_tasks: u32,
    /// Complete each lease's tasks in one CompleteMany call (when none is to fail).
    pub complete_many: bool,
}

impl Default for WorkerPlan {
    fn default() -> Self {
        WorkerPlan {
            fail_first: 0,
            lease: Duration::from_secs(3),
            max_tasks: 16,
            complete_many: false,
        }
    }
}

/// Leases from `queue` through whichever replica answers and completes (or fails,
/// per the plan) every task, until `stop`. Every report is retried through
/// transient errors until it is answered OK or LEASE_LOST.
pub async fn work(
    name: String,
    urls: Vec<String>,
    queue: String,
    plan: WorkerPlan,
    ledger: Arc<Ledger>,
    stop: CancellationToken,
) {
    let clients: Vec<_> = urls
        .iter()
        .map(|u| BrokerServiceClient::new(channel(u)))
        .collect();
    let mut turn = 0usize;
    while !stop.is_cancelled() {
        let mut c = clients[turn % clients.len()].clone();
        turn += 1;
        let req = pb::LeaseRequest {
            labels: Default::default(),
            worker_id: name.clone(),
            queues: vec![queue.clone()],
            max_tasks: plan.max_tasks,
            lease_duration: Some(prost_types::Duration {
                seconds: plan.lease.as_secs() as i64,
                nanos: plan.lease.subsec_nanos() as i32,
            }),
            wait: Some(prost_types::Duration {
                seconds: 0,
                nanos: 500_000_000,
            }),
        };
        let tasks = tokio::select! {
            _ = stop.cancelled() => return,
            r = c.lease(req) => match r {
                Ok(r) => r.into_inner().tasks,
                Err(s) if transient(&s) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(s) => panic!("lease refused: {s:?}"),
            },
        };
        if plan.complete_many && plan.fail_first == 0 && !tasks.is_empty() {
            complete_many(&clients, &mut turn, &tasks, &ledger, &stop).await;
            continue;
        }
        for t in tasks {
            report(&clients, &mut turn, &t, &plan, &ledger, &stop).await;
        }
    }
}

/// Completes `tasks` in one call, retried through transient errors.
async fn complete_many(
    clients: &[BrokerServiceClient<Channel>],
    turn: &mut usize,
    tasks: &[pb::LeasedTask],
    ledger: &Ledger,
    stop: &CancellationToken,
) {
    let completions: Vec<pb::CompleteRequest> = tasks
        .iter()
        .map(|t| pb::CompleteRequest {
            task_id: t.task_id.clone(),
            lease_token: t.lease_token.clone(),
            result: b"ok".to_vec(),
            lease_next: None,
        })
        .collect();
    while !stop.is_cancelled() {
        let mut c = clients[*turn % clients.len()].clone();
        *turn += 1;
        let req = pb::CompleteManyRequest {
            completions: completions.clone(),
            lease_next: None,
        };
        match c.complete_many(req).await {
            Ok(r) => {
                let results = r.into_inner().results;
                assert_eq!(results.len(), tasks.len(), "one result per completion");
                let mut completed = ledger.completed.lock().unwrap();
                for (t, r) in tasks.iter().zip(results) {
                    if r.outcome == pb::CompleteOutcome::Completed as i32 {
                        completed
                            .entry(t.task_id.clone())
                            .or_default()
                            .insert(t.lease_token.clone());
                    }
                }
                return;
            }
            Err(s) if transient(&s) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(s) => panic!("CompleteMany refused: {s:?}"),
        }
    }
}

async fn report(
    clients: &[BrokerServiceClient<Channel>],
    turn: &mut usize,
    t: &pb::LeasedTask,
    plan: &WorkerPlan,
    ledger: &Ledger,
    stop: &CancellationToken,
) {
    let fail = t.attempt <= plan.fail_first;
    while !stop.is_cancelled() {
        let mut c = clients[*turn % clients.len()].clone();
        *turn += 1;
        let r = if fail {
            c.fail(pb::FailRequest {
                prefer_same_worker: false,
                task_id: t.task_id.clone(),
                lease_token: t.lease_token.clone(),
                error_message: format!("planned failure {}", t.attempt),
                non_retryable: false,
                retry_after: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 1_000_000,
                }),
                lease_next: None,
                cooldown: None,
            })
            .await
            .map(|_| ())
        } else {
            c.complete(pb::CompleteRequest {
                task_id: t.task_id.clone(),
                lease_token: t.lease_token.clone(),
                result: b"ok".to_vec(),
                lease_next: None,
            })
            .await
            .map(|_| ())
        };
        match r {
            Ok(()) if fail => {
                *ledger.failed.lock().unwrap() += 1;
                return;
            }
            Ok(()) => {
                ledger
                    .completed
                    .lock()
                    .unwrap()
                    .entry(t.task_id.clone())
                    .or_default()
                    .insert(t.lease_token.clone());
                return;
            }
            // Reclaimed (the lease expired while the broker was away): another
            // lease will run it.
            Err(s) if s.code() == Code::Aborted => return,
            Err(s) if transient(&s) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(s) => panic!("report refused: {s:?}"),
        }
    }
}

/// Spawns `n` workers on `urls`; returns their handles.
pub fn spawn_workers(
    n: usize,
    urls: &[String],
    queue: &str,
    plan: WorkerPlan,
    ledger: &Arc<Ledger>,
    stop: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            tokio::spawn(work(
                format!("worker-{i}"),
                urls.to_vec(),
                queue.to_string(),
                plan,
                ledger.clone(),
                stop.clone(),
            ))
        })
        .collect()
}

/// Stops the workers and surfaces a panic in any of them.
pub async fn stop_workers(stop: CancellationToken, workers: Vec<tokio::task::JoinHandle<()>>) {
    stop.cancel();
    for w in workers {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("a worker stops")
            .expect("a worker did not panic");
    }
}
