//! The shared client conformance scenario (`clients/conformance/SCENARIO.md`) for the
//! Rust client, against the broker at `$TASKBROKER_ADDR` (`host:port`).
//!
//! Prints `PASS case` or `FAIL case: reason` per case, then `N passed, M failed`, and
//! exits non-zero when any case failed. Run it with `scripts/conformance.sh rust`.

mod flow;
#[path = "../common/meter.rs"]
mod meter;
mod results;
mod routing;
mod spec;

// The cases, one module per folder of clients/conformance/cases/ in the order of
// clients/conformance/cases.txt (scripts/conformance.sh checks that this list matches it).
#[path = "../../../clients/conformance/cases/10-bad_input/case.rs"]
mod bad_input;
#[path = "../../../clients/conformance/cases/09-cancel_running/case.rs"]
mod cancel_running;
#[path = "../../../clients/conformance/cases/13-checkpoint_extends/case.rs"]
mod checkpoint_extends;
#[path = "../../../clients/conformance/cases/04-checkpoint_handover/case.rs"]
mod checkpoint_handover;
#[path = "../../../clients/conformance/cases/08-complete_result/case.rs"]
mod complete_result;
#[path = "../../../clients/conformance/cases/29-dead_result/case.rs"]
mod dead_result;
#[path = "../../../clients/conformance/cases/14-deadline_cancels/case.rs"]
mod deadline_cancels;
#[path = "../../../clients/conformance/cases/21-dependency/case.rs"]
mod dependency;
#[path = "../../../clients/conformance/cases/26-dependency_results/case.rs"]
mod dependency_results;
#[path = "../../../clients/conformance/cases/16-drain_on_sigterm/case.rs"]
mod drain_on_sigterm;
#[path = "../../../clients/conformance/cases/03-heartbeat_extends/case.rs"]
mod heartbeat_extends;
#[path = "../../../clients/conformance/cases/02-idempotent_submit/case.rs"]
mod idempotent_submit;
#[path = "../../../clients/conformance/cases/27-keys_and_replace/case.rs"]
mod keys_and_replace;
#[path = "../../../clients/conformance/cases/12-lease_lost_reason/case.rs"]
mod lease_lost_reason;
#[path = "../../../clients/conformance/cases/23-lease_next/case.rs"]
mod lease_next;
#[path = "../../../clients/conformance/cases/01-lease_order/case.rs"]
mod lease_order;
#[path = "../../../clients/conformance/cases/06-non_retryable_fail/case.rs"]
mod non_retryable_fail;
#[path = "../../../clients/conformance/cases/05-retryable_fail/case.rs"]
mod retryable_fail;
#[path = "../../../clients/conformance/cases/18-schedule_every/case.rs"]
mod schedule_every;
#[path = "../../../clients/conformance/cases/11-spec_defaults/case.rs"]
mod spec_defaults;
#[path = "../../../clients/conformance/cases/07-stale_token/case.rs"]
mod stale_token;
#[path = "../../../clients/conformance/cases/20-sticky_retry/case.rs"]
mod sticky_retry;
#[path = "../../../clients/conformance/cases/15-stop_codes/case.rs"]
mod stop_codes;
#[path = "../../../clients/conformance/cases/28-submit_backpressure/case.rs"]
mod submit_backpressure;
#[path = "../../../clients/conformance/cases/19-targeted_task/case.rs"]
mod targeted_task;
#[path = "../../../clients/conformance/cases/17-trace_propagation/case.rs"]
mod trace_propagation;
#[path = "../../../clients/conformance/cases/25-typed_handlers/case.rs"]
mod typed_handlers;
#[path = "../../../clients/conformance/cases/22-wait_by_stream/case.rs"]
mod wait_by_stream;
#[path = "../../../clients/conformance/cases/24-worker_id_binding/case.rs"]
mod worker_id_binding;

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use taskbroker_client::pb;
use taskbroker_client::time::to_proto_duration;
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

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("lease_order", |c, q| {
            Box::pin(lease_order::lease_order(c, q))
        }),
        ("idempotent_submit", |c, q| {
            Box::pin(idempotent_submit::idempotent_submit(c, q))
        }),
        ("heartbeat_extends", |c, q| {
            Box::pin(heartbeat_extends::heartbeat_extends(c, q))
        }),
        ("checkpoint_handover", |c, q| {
            Box::pin(checkpoint_handover::checkpoint_handover(c, q))
        }),
        ("retryable_fail", |c, q| {
            Box::pin(retryable_fail::retryable_fail(c, q))
        }),
        ("non_retryable_fail", |c, q| {
            Box::pin(non_retryable_fail::non_retryable_fail(c, q))
        }),
        ("stale_token", |c, q| {
            Box::pin(stale_token::stale_token(c, q))
        }),
        ("complete_result", |c, q| {
            Box::pin(complete_result::complete_result(c, q))
        }),
        ("cancel_running", |c, q| {
            Box::pin(cancel_running::cancel_running(c, q))
        }),
        ("bad_input", |c, q| Box::pin(bad_input::bad_input(c, q))),
        ("spec_defaults", |c, q| {
            Box::pin(spec_defaults::spec_defaults(c, q))
        }),
        ("lease_lost_reason", |c, q| {
            Box::pin(lease_lost_reason::lease_lost_reason(c, q))
        }),
        ("checkpoint_extends", |c, q| {
            Box::pin(checkpoint_extends::checkpoint_extends(c, q))
        }),
        ("deadline_cancels", |c, q| {
            Box::pin(deadline_cancels::deadline_cancels(c, q))
        }),
        ("stop_codes", |c, q| Box::pin(stop_codes::stop_codes(c, q))),
        ("drain_on_sigterm", |c, q| {
            Box::pin(drain_on_sigterm::drain_on_sigterm(c, q))
        }),
        ("trace_propagation", |c, q| {
            Box::pin(trace_propagation::trace_propagation(c, q))
        }),
        ("schedule_every", |c, q| {
            Box::pin(schedule_every::schedule_every(c, q))
        }),
        ("targeted_task", |c, q| {
            Box::pin(targeted_task::targeted_task(c, q))
        }),
        ("sticky_retry", |c, q| {
            Box::pin(sticky_retry::sticky_retry(c, q))
        }),
        ("dependency", |c, q| Box::pin(dependency::dependency(c, q))),
        ("wait_by_stream", |c, q| {
            Box::pin(wait_by_stream::wait_by_stream(c, q))
        }),
        ("lease_next", |c, q| Box::pin(lease_next::lease_next(c, q))),
        ("worker_id_binding", |c, q| {
            Box::pin(worker_id_binding::worker_id_binding(c, q))
        }),
        ("typed_handlers", |c, q| {
            Box::pin(typed_handlers::typed_handlers(c, q))
        }),
        ("dependency_results", |c, q| {
            Box::pin(dependency_results::dependency_results(c, q))
        }),
        ("keys_and_replace", |c, q| {
            Box::pin(keys_and_replace::keys_and_replace(c, q))
        }),
        ("submit_backpressure", |c, q| {
            Box::pin(submit_backpressure::submit_backpressure(c, q))
        }),
        ("dead_result", |c, q| {
            Box::pin(dead_result::dead_result(c, q))
        }),
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
