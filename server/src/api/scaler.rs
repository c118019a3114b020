//! KEDA's external scaler protocol (`externalscaler.ExternalScaler`) on queue
//! backlogs, so a worker Deployment scales on work, down to zero and back.
//!
//! The trigger metadata KEDA passes in `ScaledObjectRef.scalerMetadata`:
//! - `queue`: the queue, or several separated by commas (their backlogs add up);
//! - `targetReadyPerReplica` (default 10): tasks per worker replica the HPA aims at;
//! - `activationReady` (default 0): the target is active while the backlog is above it;
//! - `includeLeased` (default true): the backlog counts leased (running) tasks too,
//!   so busy workers are not scaled away while nothing new waits;
//! - `targetOldestAgeSeconds` (optional): a second metric, the age of the oldest ready
//!   task, with this target (the HPA follows whichever metric asks for more replicas);
//! - `token` or `tokenFromEnv` (when authentication is on): a worker, scaler or admin
//!   token. KEDA sends no headers, so the token travels in the metadata.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::auth::{Authenticator, SCALER_ROLES};
use super::error::{invalid, status};
use crate::domain::validate::Invalid;
use crate::keda::external_scaler_server::ExternalScaler;
use crate::keda::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};
use crate::service::{Backlog, Broker};

/// The metric of the backlog (ready, plus leased unless `includeLeased` is false).
pub const BACKLOG_METRIC: &str = "taskbroker-backlog";
/// The metric of the oldest ready task's age, in seconds.
pub const OLDEST_AGE_METRIC: &str = "taskbroker-oldest-ready-age-seconds";

/// How often a StreamIsActive stream looks at the backlog; it sends only changes.
const STREAM_POLL: Duration = Duration::from_secs(1);

/// One trigger's settings, read from its metadata.
#[derive(Debug, Clone, PartialEq)]
struct Trigger {
    queues: Vec<String>,
    target_per_replica: f64,
    activation: f64,
    include_leased: bool,
    target_oldest_age: Option<f64>,
}

const FIELD: &str = "scalerMetadata";

fn number(meta: &HashMap<String, String>, key: &str, default: f64) -> Result<f64, Invalid> {
    let Some(raw) = meta.get(key) else {
        return Ok(default);
    };
    raw.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| Invalid::new(format!("{FIELD}.{key}"), "must be a number >= 0"))
}

impl Trigger {
    fn parse(meta: &HashMap<String, String>) -> Result<Trigger, Invalid> {
        let queues: Vec<String> = meta
            .get("queue")
            .map(|q| {
                q.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if queues.is_empty() {
            return Err(Invalid::new(format!("{FIELD}.queue"), "is required"));
        }
        let target_per_replica = number(meta, "targetReadyPerReplica", 10.0)?;
        if target_per_replica <= 0.0 {
            return Err(Invalid::new(
                format!("{FIELD}.targetReadyPerReplica"),
                "must be above 0",
            ));
        }
        let include_leased = match meta.get("includeLeased").map(|s| s.trim()) {
            None | Some("true") => true,
            Some("false") => false,
            Some(_) => {
                return Err(Invalid::new(
                    format!("{FIELD}.includeLeased"),
                    "must be true or false",
                ));
            }
        };
        let target_oldest_age = match meta.get("targetOldestAgeSeconds") {
            None => None,
            Some(_) => Some(number(meta, "targetOldestAgeSeconds", 0.0)?)
                .filter(|v| *v > 0.0)
                .map(Some)
                .ok_or_else(|| {
                    Invalid::new(format!("{FIELD}.targetOldestAgeSeconds"), "must be above 0")
                })?,
        };
        Ok(Trigger {
            queues,
            target_per_replica,
            activation: number(meta, "activationReady", 0.0)?,
            include_leased,
            target_oldest_age,
        })
    }

    fn backlog_value(&self, b: &Backlog) -> f64 {
        let n = if self.include_leased {
            b.ready + b.leased
        } else {
            b.ready
        };
        n as f64
    }

    fn is_active(&self, b: &Backlog) -> bool {
        self.backlog_value(b) > self.activation
    }

    fn specs(&self) -> Vec<MetricSpec> {
        let spec = |name: &str, target: f64| MetricSpec {
            metric_name: name.to_string(),
            target_size: target.ceil() as i64,
            target_size_float: target,
        };
        let mut out = vec![spec(BACKLOG_METRIC, self.target_per_replica)];
        if let Some(age) = self.target_oldest_age {
            out.push(spec(OLDEST_AGE_METRIC, age));
        }
        out
    }
}

fn metric(name: &str, value: f64) -> MetricValue {
    MetricValue {
        metric_name: name.to_string(),
        metric_value: value.round() as i64,
        metric_value_float: value,
    }
}

pub struct ScalerApi {
    broker: Arc<Broker>,
    /// Checks the metadata token; `None` when authentication is off.
    auth: Option<Authenticator>,
}

impl ScalerApi {
    pub fn new(broker: Arc<Broker>, auth: Option<Authenticator>) -> Self {
        ScalerApi { broker, auth }
    }

    /// Authenticates the call and reads its trigger.
    fn trigger(
        &self,
        obj: Option<&ScaledObjectRef>,
        headers: &tonic::metadata::MetadataMap,
        method: &str,
    ) -> Result<Trigger, Status> {
        let empty = HashMap::new();
        let meta = obj.map(|o| &o.scaler_metadata).unwrap_or(&empty);
        let mut caller = None;
        if let Some(auth) = &self.auth {
            let token = meta
                .get("token")
                .or_else(|| meta.get("tokenFromEnv"))
                .map(String::as_str)
                .or_else(|| {
                    headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("Bearer "))
                })
                .ok_or_else(|| {
                    Status::unauthenticated(
                        "missing token: set tokenFromEnv (or token) in the trigger metadata",
                    )
                })?;
            caller = Some(auth.check_token(token, SCALER_ROLES, method)?);
        }
        let t = Trigger::parse(meta).map_err(invalid)?;
        // A worker token bound to queues reads the backlogs of those queues only.
        if let Some(p) = caller
            && let Some(q) = t.queues.iter().find(|q| !p.may_use_queue(q))
        {
            return Err(Status::permission_denied(format!(
                "{FIELD}.queue: this token may not read the queue {q:?}"
            )));
        }
        Ok(t)
    }

    async fn backlog(&self, t: &Trigger) -> Result<Backlog, Status> {
        self.broker
            .backlog(&format!("{FIELD}.queue"), &t.queues)
            .await
            .map_err(status)
    }
}

#[tonic::async_trait]
impl ExternalScaler for ScalerApi {
    async fn is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        let t = self.trigger(Some(request.get_ref()), request.metadata(), "IsActive")?;
        let b = self.backlog(&t).await?;
        Ok(Response::new(IsActiveResponse {
            result: t.is_active(&b),
        }))
    }

    type StreamIsActiveStream = ReceiverStream<Result<IsActiveResponse, Status>>;

    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let t = self.trigger(
            Some(request.get_ref()),
            request.metadata(),
            "StreamIsActive",
        )?;
        let first = t.is_active(&self.backlog(&t).await?);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let broker = self.broker.clone();
        tokio::spawn(async move {
            let mut last = first;
            if tx
                .send(Ok(IsActiveResponse { result: last }))
                .await
                .is_err()
            {
                return;
            }
            let field = format!("{FIELD}.queue");
            let mut tick = tokio::time::interval(STREAM_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Ends with the caller, or when the broker drains: KEDA reconnects
                // (to another replica) by itself.
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = broker.dispatcher().draining().cancelled() => return,
                    _ = tick.tick() => {}
                }
                match broker.backlog(&field, &t.queues).await {
                    Ok(b) => {
                        let now = t.is_active(&b);
                        if now != last {
                            last = now;
                            if tx.send(Ok(IsActiveResponse { result: now })).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(status(e))).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let t = self.trigger(Some(request.get_ref()), request.metadata(), "GetMetricSpec")?;
        Ok(Response::new(GetMetricSpecResponse {
            metric_specs: t.specs(),
        }))
    }

    async fn get_metrics(
        &self,
        request: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        let req = request.get_ref();
        let t = self.trigger(
            req.scaled_object_ref.as_ref(),
            request.metadata(),
            "GetMetrics",
        )?;
        let name = req.metric_name.as_str();
        if name != BACKLOG_METRIC && !(name == OLDEST_AGE_METRIC && t.target_oldest_age.is_some()) {
            return Err(invalid(Invalid::new(
                "metricName",
                format!(
                    "is not a metric of this trigger (GetMetricSpec names them: {BACKLOG_METRIC})"
                ),
            )));
        }
        let b = self.backlog(&t).await?;
        let value = if name == BACKLOG_METRIC {
            t.backlog_value(&b)
        } else {
            b.oldest_ready_age.as_secs_f64()
        };
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![metric(name, value)],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn triggers_parse_with_defaults_and_name_the_bad_key() {
        let t = Trigger::parse(&meta(&[("queue", "a, b")])).unwrap();
        assert_eq!(t.queues, ["a", "b"]);
        assert_eq!(t.target_per_replica, 10.0);
        assert_eq!(t.activation, 0.0);
        assert!(t.include_leased);
        assert_eq!(t.target_oldest_age, None);
        assert_eq!(t.specs().len(), 1);

        let field = |m: &[(&str, &str)]| Trigger::parse(&meta(m)).unwrap_err().field;
        assert_eq!(field(&[]), "scalerMetadata.queue");
        assert_eq!(
            field(&[("queue", "a"), ("targetReadyPerReplica", "0")]),
            "scalerMetadata.targetReadyPerReplica"
        );
        assert_eq!(
            field(&[("queue", "a"), ("activationReady", "-1")]),
            "scalerMetadata.activationReady"
        );
        assert_eq!(
            field(&[("queue", "a"), ("includeLeased", "yes")]),
            "scalerMetadata.includeLeased"
        );
        assert_eq!(
            field(&[("queue", "a"), ("targetOldestAgeSeconds", "NaN")]),
            "scalerMetadata.targetOldestAgeSeconds"
        );
    }

    #[test]
    fn activity_follows_the_backlog_over_the_activation_threshold() {
        let t = Trigger::parse(&meta(&[("queue", "a"), ("activationReady", "2")])).unwrap();
        let b = |ready, leased| Backlog {
            ready,
            leased,
            oldest_ready_age: Duration::ZERO,
        };
        assert!(!t.is_active(&b(0, 0)));
        assert!(!t.is_active(&b(1, 1)));
        assert!(t.is_active(&b(2, 1)), "leased tasks keep workers up");
        let ready_only = Trigger {
            include_leased: false,
            ..t
        };
        assert!(!ready_only.is_active(&b(2, 5)));
        assert!(ready_only.is_active(&b(3, 0)));
    }
}
