//! `taskbroker.v1.BrokerService`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::auth::Principal;
use super::convert::{self, duration, timestamp, to_timestamp};
use super::error::{invalid, status};
use crate::domain::validate::Invalid;
use crate::pb;
use crate::pb::broker_service_server::BrokerService;
use crate::service::{self, Broker, HeldBy};
use crate::store::{LeaseRef, LeaseState};
use crate::telemetry::TRACEPARENT;
use tracing::Instrument;

pub struct BrokerApi {
    broker: Arc<Broker>,
}

impl BrokerApi {
    pub fn new(broker: Arc<Broker>) -> Self {
        BrokerApi { broker }
    }
}

fn submit_task(i: usize, t: pb::TaskSpec) -> Result<service::SubmitTask, Invalid> {
    let f = |name: &str| format!("tasks[{i}].{name}");
    // Flow.
    let flow = super::flow::flow_spec(i, &t)?;
    let retry = match t.retry {
        None => service::RetrySpec::default(),
        Some(r) => service::RetrySpec {
            max_attempts: (r.max_attempts != 0).then_some(r.max_attempts),
            initial_backoff: duration(&f("retry.initial_backoff"), r.initial_backoff.as_ref())?,
            backoff_multiplier: (r.backoff_multiplier != 0.0).then_some(r.backoff_multiplier),
            max_backoff: duration(&f("retry.max_backoff"), r.max_backoff.as_ref())?,
            jitter: r.jitter,
        },
    };
    Ok(service::SubmitTask {
        run_at: timestamp(&f("run_at"), t.run_at.as_ref())?,
        deadline: timestamp(&f("deadline"), t.deadline.as_ref())?,
        queue: t.queue,
        payload: t.payload,
        key: (!t.key.is_empty()).then_some(t.key),
        priority: t.priority,
        retry,
        metadata: t.metadata.into_iter().collect(),
        target: t.target.map(convert::target_from_pb).unwrap_or_default(),
        sticky: convert::sticky_from_pb(&f("sticky"), t.sticky.as_ref())?,
        fanout: t.fanout.map(|fo| crate::domain::routing::Fanout {
            copies: fo.copies,
            distinct_workers: fo.distinct_workers,
        }),
        flow,
        concurrency_key: (!t.concurrency_key.is_empty()).then_some(t.concurrency_key),
        at_most_once: t.at_most_once,
        bucket: (!t.bucket.is_empty()).then_some(t.bucket),
        checkpoint: t.checkpoint,
        on_duplicate: match pb::DuplicateKeyPolicy::try_from(t.on_duplicate_key) {
            Ok(pb::DuplicateKeyPolicy::Unspecified | pb::DuplicateKeyPolicy::KeepExisting) => {
                service::DuplicateKey::KeepExisting
            }
            Ok(pb::DuplicateKeyPolicy::ReplaceWaiting) => service::DuplicateKey::ReplaceWaiting,
            Err(_) => {
                return Err(Invalid::new(
                    f("on_duplicate_key"),
                    format!("{} is not a DuplicateKeyPolicy", t.on_duplicate_key),
                ));
            }
        },
    })
}

/// The caller's address (the worker's, for routing) and its call deadline.
fn caller<T>(request: &Request<T>) -> (String, Option<std::time::Duration>) {
    let worker_address = request
        .remote_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    (worker_address, convert::grpc_timeout(request.metadata()))
}

/// A LeaseRequest from the wire; fields are named with `prefix` (`lease_next.` for
/// a settle's lease_next).
fn lease_request(
    prefix: &str,
    r: pb::LeaseRequest,
    (worker_address, call_timeout): (String, Option<std::time::Duration>),
) -> Result<service::LeaseRequest, Invalid> {
    Ok(service::LeaseRequest {
        lease_duration: duration(
            &format!("{prefix}lease_duration"),
            r.lease_duration.as_ref(),
        )?,
        wait: duration(&format!("{prefix}wait"), r.wait.as_ref())?,
        worker_id: r.worker_id,
        queues: r.queues,
        max_tasks: r.max_tasks,
        worker_address,
        call_timeout,
        labels: r.labels.into_iter().collect(),
    })
}

/// A settle's `lease_next`, with the call's peer and deadline.
fn lease_next<T>(
    request: &Request<T>,
    r: Option<pb::LeaseRequest>,
) -> Result<Option<service::LeaseRequest>, Invalid> {
    let Some(r) = r else { return Ok(None) };
    lease_request("lease_next.", r, caller(request)).map(Some)
}

/// The caller when its token is bound to worker ids or queues (`workers=`,
/// `queues=` in the tokens file).
fn bound<T>(request: &Request<T>) -> Option<Principal> {
    request
        .extensions()
        .get::<Principal>()
        .filter(|p| p.is_bound())
        .cloned()
}

/// PERMISSION_DENIED naming `field[i]` unless the caller may lease from every
/// one of `queues` (checked before the request is, so a refusal changes nothing).
fn check_queues(caller: Option<&Principal>, field: &str, queues: &[String]) -> Result<(), Status> {
    let Some(p) = caller else { return Ok(()) };
    match queues.iter().position(|q| !p.may_use_queue(q)) {
        Some(i) => Err(Status::permission_denied(format!(
            "{field}[{i}]: this token may not lease from the queue {:?}",
            queues[i]
        ))),
        None => Ok(()),
    }
}

/// PERMISSION_DENIED naming `field` unless the caller may use `worker_id`.
fn check_worker_id(caller: Option<&Principal>, field: &str, worker_id: &str) -> Result<(), Status> {
    match caller {
        Some(p) if !p.may_use_worker_id(worker_id) => Err(Status::permission_denied(format!(
            "{field}: this token may not use the worker id {worker_id:?}"
        ))),
        _ => Ok(()),
    }
}

/// A settle's `lease_next.worker_id` must be one the caller may use.
fn check_lease_next(
    caller: Option<&Principal>,
    next: Option<&pb::LeaseRequest>,
) -> Result<(), Status> {
    match next {
        Some(n) => {
            check_worker_id(caller, "lease_next.worker_id", &n.worker_id)?;
            check_queues(caller, "lease_next.queues", &n.queues)
        }
        None => Ok(()),
    }
}

impl BrokerApi {
    /// PERMISSION_DENIED when a bound caller settles (or heartbeats, or
    /// checkpoints) a lease held under a worker id it may not use.
    async fn check_holders(
        &self,
        caller: Option<&Principal>,
        call: HeldBy,
        leases: &[LeaseRef],
    ) -> Result<(), Status> {
        let Some(p) = caller else { return Ok(()) };
        self.broker
            .check_lease_holders(
                call,
                leases,
                |w| p.may_use_worker_id(w),
                |q| p.may_use_queue(q),
            )
            .await
            .map_err(status)
    }
}

fn lease_ref(task_id: &str, lease_token: &str) -> LeaseRef {
    LeaseRef {
        task_id: task_id.to_string(),
        lease_token: lease_token.to_string(),
    }
}

/// The `receive` span of a Lease (OpenTelemetry messaging conventions): named
/// for its queue when it names one, with the batch it delivered.
fn receive_span(queues: &[String], worker_id: &str) -> tracing::Span {
    let name = match queues {
        [one] => format!("receive {one}"),
        _ => "receive".to_string(),
    };
    let destination = match queues {
        [one] => one.as_str(),
        _ => "",
    };
    tracing::info_span!(
        "receive",
        otel.name = %name,
        otel.kind = "client",
        messaging.system = "taskbroker",
        messaging.operation.type = "receive",
        messaging.operation.name = "lease",
        messaging.destination.name = %destination,
        messaging.client.id = %worker_id,
        messaging.batch.message_count = tracing::field::Empty,
        messaging.message.id = tracing::field::Empty,
    )
}

fn record_received(span: &tracing::Span, tasks: &[crate::store::TaskRecord]) {
    span.record("messaging.batch.message_count", tasks.len());
    if let [one] = tasks {
        span.record("messaging.message.id", one.id.as_str());
    }
}

/// The `settle` span of a Complete, CompleteMany or Fail (`operation` names which).
fn settle_span(operation: &'static str, count: usize, task_id: Option<&str>) -> tracing::Span {
    let span = tracing::info_span!(
        "settle",
        otel.name = operation,
        otel.kind = "client",
        messaging.system = "taskbroker",
        messaging.operation.type = "settle",
        messaging.operation.name = operation,
        messaging.batch.message_count = count,
        messaging.message.id = tracing::field::Empty,
    );
    if let Some(id) = task_id {
        span.record("messaging.message.id", id);
    }
    span
}

fn leased(tasks: Vec<crate::store::TaskRecord>) -> Vec<pb::LeasedTask> {
    tasks.into_iter().map(convert::leased_task).collect()
}

fn lease_status(task_id: String, s: LeaseState) -> pb::LeaseStatus {
    match s {
        LeaseState::Lost => pb::LeaseStatus {
            task_id,
            lost: true,
            lease_expires_at: None,
            cancel_requested: false,
        },
        LeaseState::Live {
            lease_expires_at,
            cancel_requested,
        } => pb::LeaseStatus {
            task_id,
            lost: false,
            lease_expires_at: Some(to_timestamp(lease_expires_at)),
            cancel_requested,
        },
    }
}

#[tonic::async_trait]
impl BrokerService for BrokerApi {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let producer = super::producer_of(&request);
        let commit_by = request
            .extensions()
            .get::<super::guard::CommitBy>()
            .map(|c| c.0);
        // The caller's own context, as the client libraries send it (docs/client-spec.md, 7).
        let header_tp = request
            .metadata()
            .get(TRACEPARENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let tasks = request
            .into_inner()
            .tasks
            .into_iter()
            .enumerate()
            .map(|(i, t)| submit_task(i, t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let tasks = match &producer {
            Some(name) => tasks
                .into_iter()
                .map(|mut t| {
                    t.metadata.insert(super::PRODUCER_KEY.into(), name.clone());
                    t
                })
                .collect(),
            None => tasks,
        };
        // One `create <queue>` span per task (a child of the caller's `send`); its
        // context travels in the task's metadata to the worker's `process` span
        // (unless the producer put a traceparent of its own there; one equal to the call's
        // header is the client library's copy of the caller's context, of which `create` is
        // a child, so `create` replaces it).
        let spans: Vec<tracing::Span> = tasks
            .iter()
            .map(|t| {
                tracing::info_span!(
                    "create",
                    otel.name = %format!("create {}", t.queue),
                    otel.kind = "producer",
                    messaging.system = "taskbroker",
                    messaging.operation.type = "create",
                    messaging.operation.name = "submit",
                    messaging.destination.name = %t.queue,
                    messaging.message.id = tracing::field::Empty,
                )
            })
            .collect();
        let mut tasks = tasks;
        for (t, span) in tasks.iter_mut().zip(&spans) {
            let own = t.metadata.get(TRACEPARENT);
            if (own.is_none() || own == header_tp.as_ref())
                && let Some(tp) = crate::telemetry::traceparent(span)
            {
                t.metadata.insert(TRACEPARENT.into(), tp);
            }
        }
        // Run to its end even when the call is dropped at its deadline: the
        // insert then commits or rolls back by `commit_by`, never half-way.
        let broker = self.broker.clone();
        let inserted = tokio::spawn(
            async move {
                broker
                    .submit_until(tasks, producer.as_deref(), commit_by)
                    .await
            }
            .in_current_span(),
        )
        .await
        .map_err(|_| Status::internal("internal error"))?
        .map_err(status)?;
        for (span, r) in spans.iter().zip(&inserted) {
            span.record("messaging.message.id", r.task_id.as_str());
        }
        Ok(Response::new(pb::SubmitResponse {
            results: inserted
                .into_iter()
                .map(|r| pb::SubmitResult {
                    task_id: r.task_id,
                    deduplicated: r.deduplicated,
                    copy_task_ids: r.copy_task_ids,
                    replaced: r.replaced,
                })
                .collect(),
        }))
    }

    async fn lease(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let from = caller(&request);
        let who = bound(&request);
        let r = request.into_inner();
        check_worker_id(who.as_ref(), "worker_id", &r.worker_id)?;
        check_queues(who.as_ref(), "queues", &r.queues)?;
        let req = lease_request("", r, from).map_err(invalid)?;
        let span = receive_span(&req.queues, &req.worker_id);
        let tasks = self
            .broker
            .lease(req)
            .instrument(span.clone())
            .await
            .map_err(status)?;
        record_received(&span, &tasks);
        Ok(Response::new(pb::LeaseResponse {
            tasks: leased(tasks),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let (worker_address, _) = caller(&request);
        let who = bound(&request);
        let r = request.into_inner();
        check_worker_id(who.as_ref(), "worker_id", &r.worker_id)?;
        if who.is_some() {
            let leases: Vec<LeaseRef> = r
                .leases
                .iter()
                .map(|l| lease_ref(&l.task_id, &l.lease_token))
                .collect();
            self.check_holders(who.as_ref(), HeldBy::Heartbeat, &leases)
                .await?;
        }
        // Routing: the worker registry (throttled).
        self.broker
            .worker_heartbeat(&r.worker_id, &worker_address)
            .await;
        let extend_by = duration("extend_by", r.extend_by.as_ref()).map_err(invalid)?;
        let leases: Vec<LeaseRef> = r
            .leases
            .into_iter()
            .map(|l| LeaseRef {
                task_id: l.task_id,
                lease_token: l.lease_token,
            })
            .collect();
        let ids: Vec<String> = leases.iter().map(|l| l.task_id.clone()).collect();
        let states = self
            .broker
            .heartbeat(leases, extend_by)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::HeartbeatResponse {
            leases: ids
                .into_iter()
                .zip(states)
                .map(|(id, s)| lease_status(id, s))
                .collect(),
        }))
    }

    async fn checkpoint(
        &self,
        request: Request<pb::CheckpointRequest>,
    ) -> Result<Response<pb::CheckpointResponse>, Status> {
        let who = bound(&request);
        let r = request.into_inner();
        if who.is_some() {
            let held = [lease_ref(&r.task_id, &r.lease_token)];
            self.check_holders(who.as_ref(), HeldBy::One, &held).await?;
        }
        let req = service::CheckpointRequest {
            extend_by: duration("extend_by", r.extend_by.as_ref()).map_err(invalid)?,
            task_id: r.task_id,
            lease_token: r.lease_token,
            checkpoint: r.checkpoint,
        };
        let task_id = req.task_id.clone();
        let s = lease_status(task_id, self.broker.checkpoint(req).await.map_err(status)?);
        Ok(Response::new(pb::CheckpointResponse {
            lease_expires_at: s.lease_expires_at,
            cancel_requested: s.cancel_requested,
        }))
    }

    async fn complete(
        &self,
        mut request: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        let who = bound(&request);
        let next = request.get_mut().lease_next.take();
        check_lease_next(who.as_ref(), next.as_ref())?;
        let next = lease_next(&request, next).map_err(invalid)?;
        let r = request.into_inner();
        if who.is_some() {
            let held = [lease_ref(&r.task_id, &r.lease_token)];
            self.check_holders(who.as_ref(), HeldBy::One, &held).await?;
        }
        let span = settle_span("complete", 1, Some(&r.task_id));
        let next_tasks = self
            .broker
            .complete_leasing(r.task_id, r.lease_token, r.result, next)
            .instrument(span)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::CompleteResponse {
            next_tasks: leased(next_tasks),
        }))
    }

    async fn complete_many(
        &self,
        mut request: Request<pb::CompleteManyRequest>,
    ) -> Result<Response<pb::CompleteManyResponse>, Status> {
        let who = bound(&request);
        let next = request.get_mut().lease_next.take();
        check_lease_next(who.as_ref(), next.as_ref())?;
        let next = lease_next(&request, next).map_err(invalid)?;
        let r = request.into_inner();
        // lease_next is the batch's, not a completion's.
        if let Some(i) = r.completions.iter().position(|c| c.lease_next.is_some()) {
            let field = format!("completions[{i}].lease_next");
            let message = "must be unset; set CompleteManyRequest.lease_next instead";
            return Err(invalid(Invalid::new(field, message)));
        }
        let items: Vec<service::CompleteItem> = r
            .completions
            .into_iter()
            .map(|c| service::CompleteItem {
                task_id: c.task_id,
                lease_token: c.lease_token,
                result: c.result,
            })
            .collect();
        if who.is_some() {
            let held: Vec<LeaseRef> = items
                .iter()
                .map(|c| lease_ref(&c.task_id, &c.lease_token))
                .collect();
            self.check_holders(who.as_ref(), HeldBy::CompleteMany, &held)
                .await?;
        }
        let ids: Vec<String> = items.iter().map(|c| c.task_id.clone()).collect();
        let one = (ids.len() == 1).then(|| ids[0].as_str());
        let span = settle_span("complete", ids.len(), one);
        let (outcomes, next_tasks) = self
            .broker
            .complete_many_leasing(items, next)
            .instrument(span)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::CompleteManyResponse {
            results: ids
                .into_iter()
                .zip(outcomes)
                .map(|(task_id, o)| pb::CompleteResult {
                    task_id,
                    outcome: match o {
                        service::CompleteOutcome::Completed => pb::CompleteOutcome::Completed,
                        service::CompleteOutcome::LeaseLost => pb::CompleteOutcome::LeaseLost,
                        service::CompleteOutcome::NotFound => pb::CompleteOutcome::NotFound,
                    } as i32,
                })
                .collect(),
            next_tasks: leased(next_tasks),
        }))
    }

    async fn fail(
        &self,
        mut request: Request<pb::FailRequest>,
    ) -> Result<Response<pb::FailResponse>, Status> {
        let who = bound(&request);
        let next = request.get_mut().lease_next.take();
        check_lease_next(who.as_ref(), next.as_ref())?;
        let next = lease_next(&request, next).map_err(invalid)?;
        let r = request.into_inner();
        if who.is_some() {
            let held = [lease_ref(&r.task_id, &r.lease_token)];
            self.check_holders(who.as_ref(), HeldBy::One, &held).await?;
        }
        let req = service::FailRequest {
            retry_after: duration("retry_after", r.retry_after.as_ref()).map_err(invalid)?,
            task_id: r.task_id,
            lease_token: r.lease_token,
            error_message: r.error_message,
            non_retryable: r.non_retryable,
            prefer_same_worker: r.prefer_same_worker,
            cooldown: super::buckets::cooldown_from_pb(r.cooldown).map_err(invalid)?,
        };
        let span = settle_span("fail", 1, Some(&req.task_id));
        let (out, next_tasks) = self
            .broker
            .fail_leasing(req, next)
            .instrument(span)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::FailResponse {
            state: convert::state_to_pb(out.state) as i32,
            next_run_at: out.next_run_at.map(to_timestamp),
            next_tasks: leased(next_tasks),
        }))
    }
}
