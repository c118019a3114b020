//! The shared client conformance scenario (`clients/conformance/SCENARIO.md`) for the
//! Rust client, against the broker at `$TASKBROKER_ADDR` (`host:port`).
//!
//! Prints `PASS case` or `FAIL case: reason` per case, then `N passed, M failed`, and
//! exits non-zero when any case failed. Run it with `scripts/conformance.sh rust`.

mod binding;
mod flow;
mod lease_next;
#[path = "../common/meter.rs"]
mod meter;
mod results;
mod routing;
mod spec;
mod typed;

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use taskbroker_client::pb::{self, TaskState};
use taskbroker_client::time::{from_proto_timestamp, to_proto_duration};
use taskbroker_client::{Client, Error, TaskSpec};

const WORKER_ID: &str = "conf-rust";
/// A case that takes longer than this is stuck; it fails instead of hanging the run.
const CASE_TIMEOUT: Duration = Duration::from_secs(60);

type Outcome = Result<(), String>;
type Case = fn(Client, String) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;

fn check(cond: bool, reason: impl Into<String>) -> Outcome {
    if cond { Ok(()) } else { Err(reason.into()) }
}

/// Turns a client error into a case failure naming the step.
fn at<T>(step: &str, r: Result<T, Error>) -> Result<T, String> {
    r.map_err(|e| format!("{step}: {e}"))
}

async fn lease(
    c: &Client,
    queue: &str,
    n: u32,
    lease_for: Duration,
    wait: Duration,
) -> Result<Vec<pb::LeasedTask>, String> {
    let req = pb::LeaseRequest {
        labels: Default::default(),
        worker_id: WORKER_ID.into(),
        queues: vec![queue.into()],
        max_tasks: n,
        lease_duration: Some(to_proto_duration(lease_for)),
        wait: Some(to_proto_duration(wait)),
    };
    at("Lease", c.lease(req).await)
}

async fn lease_one(
    c: &Client,
    queue: &str,
    lease_for: Duration,
    wait: Duration,
) -> Result<pb::LeasedTask, String> {
    let mut tasks = lease(c, queue, 1, lease_for, wait).await?;
    check(
        tasks.len() == 1,
        format!("Lease returned {} tasks, want 1", tasks.len()),
    )?;
    Ok(tasks.remove(0))
}

async fn submit(c: &Client, spec: TaskSpec) -> Result<String, String> {
    Ok(at("Submit", c.submit(spec).await)?.task_id)
}

fn fail_req(t: &pb::LeasedTask, message: &str, non_retryable: bool) -> pb::FailRequest {
    pb::FailRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        error_message: message.into(),
        non_retryable,
        retry_after: None,
        prefer_same_worker: false,
        lease_next: None,
        cooldown: None,
    }
}

fn heartbeat_req(task_id: &str, token: &str, extend_by: Option<Duration>) -> pb::HeartbeatRequest {
    pb::HeartbeatRequest {
        worker_id: WORKER_ID.into(),
        leases: vec![pb::LeaseRef {
            task_id: task_id.into(),
            lease_token: token.into(),
        }],
        extend_by: extend_by.map(to_proto_duration),
    }
}

async fn lease_order(c: Client, q: String) -> Outcome {
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let spec = |p: &str, prio: i32| TaskSpec::new(q.clone(), p.as_bytes().to_vec()).priority(prio);
    at(
        "Submit",
        c.submit_many([
            spec("a", 0),
            spec("b", 5),
            spec("c", 5).deadline(now + 2 * hour),
            spec("d", 5).deadline(now + hour),
            spec("e", -1),
            spec("f", 10).run_at(now + hour),
        ])
        .await,
    )?;
    let tasks = lease(&c, &q, 10, Duration::from_secs(30), Duration::ZERO).await?;
    let got: Vec<String> = tasks
        .iter()
        .map(|t| String::from_utf8_lossy(&t.payload).into_owned())
        .collect();
    check(
        got == ["d", "c", "b", "a", "e"],
        format!("leased {got:?}, want [d, c, b, a, e]"),
    )?;
    check(tasks.iter().all(|t| t.attempt == 1), "an attempt is not 1")?;
    for t in tasks {
        let req = pb::CompleteRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            result: Vec::new(),
            lease_next: None,
        };
        at("Complete", c.complete(req).await)?;
    }
    Ok(())
}

async fn idempotent_submit(c: Client, q: String) -> Outcome {
    let first = at(
        "Submit",
        c.submit(TaskSpec::new(q.clone(), Vec::new()).key("order-42"))
            .await,
    )?;
    let second = at(
        "Submit",
        c.submit(TaskSpec::new(q, Vec::new()).key("order-42")).await,
    )?;
    check(
        first.task_id == second.task_id,
        "the two submits gave different task ids",
    )?;
    check(
        !first.deduplicated && second.deduplicated,
        format!(
            "deduplicated {} then {}, want false then true",
            first.deduplicated, second.deduplicated
        ),
    )
}

async fn heartbeat_extends(c: Client, q: String) -> Outcome {
    submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    let t = lease_one(&c, &q, Duration::from_secs(5), Duration::ZERO).await?;
    let hb = at(
        "Heartbeat",
        c.heartbeat(heartbeat_req(
            &t.task_id,
            &t.lease_token,
            Some(Duration::from_secs(60)),
        ))
        .await,
    )?;
    check(
        hb.len() == 1,
        format!("{} lease statuses, want 1", hb.len()),
    )?;
    check(!hb[0].lost, "the live lease is reported lost")?;
    let leased_until =
        from_proto_timestamp(t.lease_expires_at.as_ref()).ok_or("lease has no expiry")?;
    let extended =
        from_proto_timestamp(hb[0].lease_expires_at.as_ref()).ok_or("heartbeat has no expiry")?;
    check(
        extended >= leased_until + Duration::from_secs(30),
        format!(
            "expiry moved by {:?}, want at least 30s",
            extended.duration_since(leased_until).unwrap_or_default()
        ),
    )?;
    let stale = at(
        "Heartbeat (stale)",
        c.heartbeat(heartbeat_req(&t.task_id, "stale", None)).await,
    )?;
    check(
        stale.len() == 1 && stale[0].lost,
        "a stale token is not reported lost",
    )
}

async fn checkpoint_handover(c: Client, q: String) -> Outcome {
    submit(
        &c,
        TaskSpec::new(q.clone(), Vec::new()).initial_backoff(Duration::ZERO),
    )
    .await?;
    let first = lease_one(&c, &q, Duration::from_secs(1), Duration::ZERO).await?;
    let req = pb::CheckpointRequest {
        task_id: first.task_id.clone(),
        lease_token: first.lease_token.clone(),
        checkpoint: b"step-3".to_vec(),
        extend_by: None,
    };
    at("Checkpoint", c.checkpoint(req).await)?;
    let second = lease_one(&c, &q, Duration::from_secs(30), Duration::from_secs(15)).await?;
    check(
        second.task_id == first.task_id,
        "a different task was leased",
    )?;
    check(
        second.attempt == 2,
        format!("attempt {}, want 2", second.attempt),
    )?;
    check(
        second.has_checkpoint && second.checkpoint == b"step-3",
        "the checkpoint was not handed over",
    )?;
    check(
        second.fencing_token > first.fencing_token,
        "the fencing token did not increase",
    )
}

async fn retryable_fail(c: Client, q: String) -> Outcome {
    submit(
        &c,
        TaskSpec::new(q.clone(), Vec::new())
            .max_attempts(3)
            .initial_backoff(Duration::ZERO),
    )
    .await?;
    let t = lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    let r = at("Fail", c.fail(fail_req(&t, "boom", false)).await)?;
    check(
        r.state() == TaskState::Ready || r.state() == TaskState::Scheduled,
        format!("Fail state {:?}, want READY or SCHEDULED", r.state()),
    )?;
    check(r.next_run_at.is_some(), "next_run_at is not set")?;
    let again = lease_one(&c, &q, Duration::from_secs(30), Duration::from_secs(5)).await?;
    check(
        again.task_id == t.task_id && again.attempt == 2,
        format!("attempt {}, want 2", again.attempt),
    )
}

async fn non_retryable_fail(c: Client, q: String) -> Outcome {
    let id = submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    let t = lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    let r = at("Fail", c.fail(fail_req(&t, "bad input", true)).await)?;
    check(
        r.state() == TaskState::Dead,
        format!("Fail state {:?}, want DEAD", r.state()),
    )?;
    let task = at("GetTask", c.get_task(&id).await)?;
    check(
        task.state() == TaskState::Dead,
        format!("task is {:?}, want DEAD", task.state()),
    )?;
    check(
        task.last_error == "bad input",
        format!("last_error {:?}", task.last_error),
    )
}

async fn stale_token(c: Client, q: String) -> Outcome {
    let id = submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    let req = pb::CompleteRequest {
        task_id: id.clone(),
        lease_token: "stale".into(),
        result: Vec::new(),
        lease_next: None,
    };
    match c.complete(req).await {
        Ok(()) => return Err("Complete with a stale token succeeded".into()),
        Err(e) => {
            check(
                e.code() == Some(tonic::Code::Aborted),
                format!("got {e}, want ABORTED"),
            )?;
            check(
                e.is_lease_lost(),
                format!(
                    "reason {:?}, want LEASE_LOST in domain taskbroker.dev",
                    e.reason()
                ),
            )?;
        }
    }
    let task = at("GetTask", c.get_task(&id).await)?;
    check(
        task.state() == TaskState::Leased,
        format!("task is {:?}, want LEASED", task.state()),
    )
}

async fn complete_result(c: Client, q: String) -> Outcome {
    let id = submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    let t = lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    let req = pb::CompleteRequest {
        task_id: id.clone(),
        lease_token: t.lease_token,
        result: b"done:42".to_vec(),
        lease_next: None,
    };
    at("Complete", c.complete(req.clone()).await)?;
    at("Complete (repeated)", c.complete(req).await)?;
    let task = at("GetTask", c.get_task(&id).await)?;
    check(
        task.state() == TaskState::Succeeded,
        format!("task is {:?}, want SUCCEEDED", task.state()),
    )?;
    check(task.result == b"done:42", "the result was not stored")
}

async fn cancel_running(c: Client, q: String) -> Outcome {
    let id = submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    let t = lease_one(&c, &q, Duration::from_secs(30), Duration::ZERO).await?;
    at("CancelTask", c.cancel_task(&id).await)?;
    let hb = at(
        "Heartbeat",
        c.heartbeat(heartbeat_req(&id, &t.lease_token, None)).await,
    )?;
    check(
        hb.len() == 1 && hb[0].cancel_requested && !hb[0].lost,
        "heartbeat does not say cancel_requested",
    )?;
    let r = at("Fail", c.fail(fail_req(&t, "cancelled", false)).await)?;
    check(
        r.state() == TaskState::Cancelled,
        format!("Fail state {:?}, want CANCELLED", r.state()),
    )
}

async fn bad_input(c: Client, _q: String) -> Outcome {
    match c.submit(TaskSpec::new("has space", Vec::new())).await {
        Ok(_) => Err("a queue named \"has space\" was accepted".into()),
        Err(e) => {
            check(
                e.code() == Some(tonic::Code::InvalidArgument),
                format!("got {e}, want INVALID_ARGUMENT"),
            )?;
            check(
                e.to_string().contains("tasks[0].queue"),
                format!("{e:?} does not name tasks[0].queue"),
            )
        }
    }
}

async fn schedule_every(c: Client, q: String) -> Outcome {
    use taskbroker_client::NewSchedule;
    use taskbroker_client::pb::{OverlapPolicy, ScheduleState};
    let s = NewSchedule::every(&q, Duration::from_secs(1))
        .queue(&q)
        .payload(b"tick".to_vec())
        .overlap(OverlapPolicy::Allow);
    let created = c.schedules().create(s).await.map_err(|e| e.to_string())?;
    check(
        created.state() == ScheduleState::Active,
        format!("state {:?}, want ACTIVE", created.state()),
    )?;
    for _ in 0..2 {
        let req = pb::LeaseRequest {
            labels: Default::default(),
            worker_id: "conf-rust".into(),
            queues: vec![q.clone()],
            max_tasks: 1,
            lease_duration: Some(to_proto_duration(Duration::from_secs(30))),
            wait: Some(to_proto_duration(Duration::from_secs(10))),
        };
        let mut tasks = c.lease(req).await.map_err(|e| e.to_string())?;
        let t = tasks.pop().ok_or("no scheduled task within 10s")?;
        check(t.payload == b"tick", format!("payload {:?}", t.payload))?;
        check(
            t.metadata.get("taskbroker.schedule_id") == Some(&q),
            format!("metadata {:?} lacks taskbroker.schedule_id", t.metadata),
        )?;
        c.complete(pb::CompleteRequest {
            task_id: t.task_id,
            lease_token: t.lease_token,
            result: Vec::new(),
            lease_next: None,
        })
        .await
        .map_err(|e| e.to_string())?;
    }
    let got = c.schedules().get(&q).await.map_err(|e| e.to_string())?;
    check(got.runs >= 2, format!("runs {}, want >= 2", got.runs))?;
    c.schedules().delete(&q).await.map_err(|e| e.to_string())?;
    match c.schedules().get(&q).await {
        Err(e) if e.code() == Some(tonic::Code::NotFound) => Ok(()),
        other => Err(format!("after delete: {other:?}, want NOT_FOUND")),
    }
}

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("lease_order", |c, q| Box::pin(lease_order(c, q))),
        ("idempotent_submit", |c, q| {
            Box::pin(idempotent_submit(c, q))
        }),
        ("heartbeat_extends", |c, q| {
            Box::pin(heartbeat_extends(c, q))
        }),
        ("checkpoint_handover", |c, q| {
            Box::pin(checkpoint_handover(c, q))
        }),
        ("retryable_fail", |c, q| Box::pin(retryable_fail(c, q))),
        ("non_retryable_fail", |c, q| {
            Box::pin(non_retryable_fail(c, q))
        }),
        ("stale_token", |c, q| Box::pin(stale_token(c, q))),
        ("complete_result", |c, q| Box::pin(complete_result(c, q))),
        ("cancel_running", |c, q| Box::pin(cancel_running(c, q))),
        ("bad_input", |c, q| Box::pin(bad_input(c, q))),
        ("spec_defaults", |c, q| Box::pin(spec::spec_defaults(c, q))),
        ("lease_lost_reason", |c, q| {
            Box::pin(spec::lease_lost_reason(c, q))
        }),
        ("checkpoint_extends", |c, q| {
            Box::pin(spec::checkpoint_extends(c, q))
        }),
        ("deadline_cancels", |c, q| {
            Box::pin(spec::deadline_cancels(c, q))
        }),
        ("stop_codes", |c, q| Box::pin(spec::stop_codes(c, q))),
        ("drain_on_sigterm", |c, q| {
            Box::pin(spec::drain_on_sigterm(c, q))
        }),
        ("trace_propagation", |c, q| {
            Box::pin(spec::trace_propagation(c, q))
        }),
        ("typed_handlers", |c, q| {
            Box::pin(typed::typed_handlers(c, q))
        }),
        ("schedule_every", |c, q| Box::pin(schedule_every(c, q))),
        ("targeted_task", |c, q| {
            Box::pin(routing::targeted_task(c, q))
        }),
        ("sticky_retry", |c, q| Box::pin(routing::sticky_retry(c, q))),
        ("dependency", |c, q| Box::pin(flow::dependency(c, q))),
        ("wait_by_stream", |c, q| {
            Box::pin(flow::wait_by_stream(c, q))
        }),
        ("lease_next", |c, q| Box::pin(lease_next::lease_next(c, q))),
        ("worker_id_binding", |c, q| {
            Box::pin(binding::worker_id_binding(c, q))
        }),
        ("dependency_results", |c, q| {
            Box::pin(results::dependency_results(c, q))
        }),
        ("keys_and_replace", |c, q| {
            Box::pin(results::keys_and_replace(c, q))
        }),
        ("submit_backpressure", |c, q| {
            Box::pin(results::submit_backpressure(c, q))
        }),
        ("dead_result", |c, q| Box::pin(results::dead_result(c, q))),
    ]
}

fn suffix() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..4)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[tokio::main]
async fn main() -> ExitCode {
    let addr = std::env::var("TASKBROKER_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".into());
    // TLS, mTLS and the token come from TASKBROKER_CA / _CLIENT_CERT / _CLIENT_KEY / _TOKEN
    // when `scripts/conformance.sh rust --secure` sets them.
    let connected = match Client::builder(addr.clone()).env_settings() {
        Ok(b) => b.connect().await,
        Err(e) => Err(e),
    };
    let client = match connected {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL connect: {e}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let (mut passed, mut failed) = (0, 0);
    for (name, case) in cases() {
        let queue = format!("conf.rust.{name}.{}", suffix());
        let outcome = match tokio::time::timeout(CASE_TIMEOUT, case(client.clone(), queue)).await {
            Ok(r) => r,
            Err(_) => Err(format!("did not finish within {CASE_TIMEOUT:?}")),
        };
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("PASS {name}");
            }
            Err(reason) => {
                failed += 1;
                println!("FAIL {name}: {reason}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
