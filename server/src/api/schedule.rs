//! `taskbroker.v1.ScheduleService`: conversions to and from the service's
//! schedule types; errors go through `error::status` like every handler.

use std::sync::Arc;

use prost_types::Timestamp;
use tonic::{Request, Response, Status};

use super::convert::{
    self, duration, retry_to_pb, state_to_pb, timestamp, to_duration, to_timestamp,
};
use super::error::{invalid, status};
use crate::domain::schedule::{Misfire, Overlap, Spec};
use crate::domain::validate::Invalid;
use crate::pb;
use crate::pb::schedule_service_server::ScheduleService;
use crate::service::{Broker, Caller, RetrySpec, RunView, ScheduleInput, SpecInput, TemplateInput};
use crate::store::ScheduleRecord;

pub struct ScheduleApi {
    broker: Arc<Broker>,
}

impl ScheduleApi {
    pub fn new(broker: Arc<Broker>) -> Self {
        ScheduleApi { broker }
    }
}

fn caller<T>(request: &Request<T>) -> Caller {
    Caller {
        producer: super::producer_of(request),
    }
}

fn ts(field: &str, t: Option<&Timestamp>) -> Result<Option<chrono::DateTime<chrono::Utc>>, Status> {
    timestamp(field, t).map_err(invalid)
}

fn spec_from_pb(prefix: &str, s: Option<pb::ScheduleSpec>) -> Result<Option<SpecInput>, Invalid> {
    use pb::schedule_spec::Kind;
    let Some(s) = s else { return Ok(None) };
    let f = |name: &str| format!("{prefix}spec.{name}");
    Ok(Some(match s.kind {
        Some(Kind::Cron(expr)) => SpecInput::Cron {
            expr,
            timezone: s.timezone,
        },
        Some(Kind::Every(d)) => SpecInput::Every {
            every: duration(&f("every"), Some(&d))?.unwrap_or_default(),
            anchor: timestamp(&f("anchor"), s.anchor.as_ref())?,
        },
        Some(Kind::OnceAt(t)) => SpecInput::Once {
            at: timestamp(&f("once_at"), Some(&t))?.unwrap_or_default(),
        },
        None => {
            return Err(Invalid::new(
                format!("{prefix}spec"),
                "must set one of cron, every, once_at",
            ));
        }
    }))
}

fn overlap_from_pb(v: i32) -> Result<Overlap, Invalid> {
    use pb::OverlapPolicy as P;
    Ok(match P::try_from(v) {
        Ok(P::Unspecified | P::Skip) => Overlap::Skip,
        Ok(P::Allow) => Overlap::Allow,
        Ok(P::BufferOne) => Overlap::BufferOne,
        Ok(P::CancelPrevious) => Overlap::CancelPrevious,
        Err(_) => {
            return Err(Invalid::new(
                "schedule.overlap",
                format!("{v} is not an overlap policy"),
            ));
        }
    })
}

fn misfire_from_pb(v: i32) -> Result<Misfire, Invalid> {
    use pb::MisfirePolicy as P;
    Ok(match P::try_from(v) {
        Ok(P::Unspecified | P::FireOnce) => Misfire::FireOnce,
        Ok(P::Skip) => Misfire::Skip,
        Ok(P::CatchUp) => Misfire::CatchUp,
        Err(_) => {
            return Err(Invalid::new(
                "schedule.misfire",
                format!("{v} is not a misfire policy"),
            ));
        }
    })
}

fn template_from_pb(t: pb::TaskTemplate) -> Result<TemplateInput, Invalid> {
    let f = |name: &str| format!("schedule.task.{name}");
    let retry = match t.retry {
        None => RetrySpec::default(),
        Some(r) => RetrySpec {
            max_attempts: (r.max_attempts != 0).then_some(r.max_attempts),
            initial_backoff: duration(&f("retry.initial_backoff"), r.initial_backoff.as_ref())?,
            backoff_multiplier: (r.backoff_multiplier != 0.0).then_some(r.backoff_multiplier),
            max_backoff: duration(&f("retry.max_backoff"), r.max_backoff.as_ref())?,
            jitter: r.jitter,
        },
    };
    Ok(TemplateInput {
        deadline_after: duration(&f("deadline_after"), t.deadline_after.as_ref())?,
        queue: t.queue,
        payload: t.payload,
        priority: t.priority,
        retry,
        metadata: t.metadata.into_iter().collect(),
        target: t.target.map(convert::target_from_pb).unwrap_or_default(),
        sticky: convert::sticky_from_pb(&f("sticky"), t.sticky.as_ref())?,
        fanout: t.fanout.map(|fo| crate::domain::routing::Fanout {
            copies: fo.copies,
            distinct_workers: fo.distinct_workers,
        }),
        concurrency_key: (!t.concurrency_key.is_empty()).then_some(t.concurrency_key),
        key: (!t.key.is_empty()).then_some(t.key),
        bucket: (!t.bucket.is_empty()).then_some(t.bucket),
    })
}

fn input_from_pb(s: Option<pb::Schedule>) -> Result<ScheduleInput, Invalid> {
    let s = s.ok_or_else(|| Invalid::new("schedule", "is required"))?;
    Ok(ScheduleInput {
        spec: spec_from_pb("schedule.", s.spec)?,
        start_time: timestamp("schedule.start_time", s.start_time.as_ref())?,
        end_time: timestamp("schedule.end_time", s.end_time.as_ref())?,
        task: s.task.map(template_from_pb).transpose()?,
        overlap: overlap_from_pb(s.overlap)?,
        misfire: misfire_from_pb(s.misfire)?,
        catchup_window: duration("schedule.catchup_window", s.catchup_window.as_ref())?,
        paused: s.paused,
        max_runs: s.max_runs,
        schedule_id: s.schedule_id,
    })
}

fn spec_to_pb(s: &Spec) -> pb::ScheduleSpec {
    use pb::schedule_spec::Kind;
    match s {
        Spec::Cron { expr, timezone } => pb::ScheduleSpec {
            kind: Some(Kind::Cron(expr.clone())),
            timezone: timezone.clone(),
            anchor: None,
        },
        Spec::Every { every, anchor } => pb::ScheduleSpec {
            kind: Some(Kind::Every(to_duration(*every))),
            timezone: String::new(),
            anchor: Some(to_timestamp(*anchor)),
        },
        Spec::Once { at } => pb::ScheduleSpec {
            kind: Some(Kind::OnceAt(to_timestamp(*at))),
            timezone: String::new(),
            anchor: None,
        },
    }
}

pub fn schedule_to_pb(s: ScheduleRecord) -> pb::Schedule {
    use pb::{MisfirePolicy as M, OverlapPolicy as O, ScheduleState as S};
    let state = if s.state_reason.is_some() {
        S::Completed
    } else if s.paused {
        S::Paused
    } else {
        S::Active
    };
    let next_fire_at = match state {
        S::Active => s.next_spec_at.into_iter().chain(s.buffered_at).min(),
        _ => None,
    };
    let t = &s.template;
    pb::Schedule {
        spec: Some(spec_to_pb(&s.spec)),
        start_time: s.start_time.map(to_timestamp),
        end_time: s.end_time.map(to_timestamp),
        task: Some(pb::TaskTemplate {
            queue: t.queue.clone(),
            payload: t.payload.clone(),
            priority: t.priority,
            retry: Some(retry_to_pb(&t.retry)),
            metadata: t.metadata.clone().into_iter().collect(),
            deadline_after: t.deadline_after.map(to_duration),
            target: (!t.target.is_empty()).then(|| convert::target_to_pb(&t.target)),
            sticky: t.sticky.map(convert::sticky_to_pb),
            fanout: t.fanout.map(|fo| pb::Fanout {
                copies: fo.copies,
                distinct_workers: fo.distinct_workers,
            }),
            concurrency_key: t.concurrency_key.clone().unwrap_or_default(),
            key: t.key.clone().unwrap_or_default(),
            bucket: crate::domain::bucket::bucket_of(&t.metadata)
                .unwrap_or_default()
                .to_string(),
        }),
        overlap: match s.overlap {
            Overlap::Allow => O::Allow,
            Overlap::Skip => O::Skip,
            Overlap::BufferOne => O::BufferOne,
            Overlap::CancelPrevious => O::CancelPrevious,
        } as i32,
        misfire: match s.misfire {
            Misfire::Skip => M::Skip,
            Misfire::FireOnce => M::FireOnce,
            Misfire::CatchUp => M::CatchUp,
        } as i32,
        catchup_window: Some(to_duration(s.catchup_window)),
        paused: s.paused,
        max_runs: s.max_runs,
        next_fire_at: next_fire_at.map(to_timestamp),
        last_fire_at: s.last_fire_at.map(to_timestamp),
        runs: s.runs,
        created_at: Some(to_timestamp(s.created_at)),
        state: state as i32,
        state_reason: s.state_reason.unwrap_or_default(),
        updated_at: Some(to_timestamp(s.updated_at)),
        schedule_id: s.id,
    }
}

fn run_to_pb(r: RunView) -> pb::ScheduleRun {
    pb::ScheduleRun {
        fire_time: Some(to_timestamp(r.fire_time)),
        task_id: r.task_id,
        task_state: r.task_state.map_or(0, |s| state_to_pb(s) as i32),
        triggered: r.triggered,
    }
}

#[tonic::async_trait]
impl ScheduleService for ScheduleApi {
    async fn create_schedule(
        &self,
        request: Request<pb::CreateScheduleRequest>,
    ) -> Result<Response<pb::CreateScheduleResponse>, Status> {
        let caller = caller(&request);
        let input = input_from_pb(request.into_inner().schedule).map_err(invalid)?;
        let s = self
            .broker
            .create_schedule(&caller, input)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::CreateScheduleResponse {
            schedule: Some(schedule_to_pb(s)),
        }))
    }

    async fn get_schedule(
        &self,
        request: Request<pb::GetScheduleRequest>,
    ) -> Result<Response<pb::GetScheduleResponse>, Status> {
        let caller = caller(&request);
        let id = request.into_inner().schedule_id;
        let s = self
            .broker
            .get_schedule(&caller, &id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::GetScheduleResponse {
            schedule: Some(schedule_to_pb(s)),
        }))
    }

    async fn list_schedules(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        let caller = caller(&request);
        let r = request.into_inner();
        let page = self
            .broker
            .list_schedules(&caller, r.page_size, &r.page_token)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListSchedulesResponse {
            schedules: page.schedules.into_iter().map(schedule_to_pb).collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn update_schedule(
        &self,
        request: Request<pb::UpdateScheduleRequest>,
    ) -> Result<Response<pb::UpdateScheduleResponse>, Status> {
        let caller = caller(&request);
        let r = request.into_inner();
        let paths = r.update_mask.map(|m| m.paths).unwrap_or_default();
        let input = input_from_pb(r.schedule).map_err(invalid)?;
        let s = self
            .broker
            .update_schedule(&caller, input, paths)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::UpdateScheduleResponse {
            schedule: Some(schedule_to_pb(s)),
        }))
    }

    async fn pause_schedule(
        &self,
        request: Request<pb::PauseScheduleRequest>,
    ) -> Result<Response<pb::PauseScheduleResponse>, Status> {
        let caller = caller(&request);
        let id = request.into_inner().schedule_id;
        let s = self
            .broker
            .pause_schedule(&caller, &id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::PauseScheduleResponse {
            schedule: Some(schedule_to_pb(s)),
        }))
    }

    async fn resume_schedule(
        &self,
        request: Request<pb::ResumeScheduleRequest>,
    ) -> Result<Response<pb::ResumeScheduleResponse>, Status> {
        let caller = caller(&request);
        let id = request.into_inner().schedule_id;
        let s = self
            .broker
            .resume_schedule(&caller, &id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ResumeScheduleResponse {
            schedule: Some(schedule_to_pb(s)),
        }))
    }

    async fn delete_schedule(
        &self,
        request: Request<pb::DeleteScheduleRequest>,
    ) -> Result<Response<pb::DeleteScheduleResponse>, Status> {
        let caller = caller(&request);
        let id = request.into_inner().schedule_id;
        self.broker
            .delete_schedule(&caller, &id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::DeleteScheduleResponse {}))
    }

    async fn trigger_schedule(
        &self,
        request: Request<pb::TriggerScheduleRequest>,
    ) -> Result<Response<pb::TriggerScheduleResponse>, Status> {
        let caller = caller(&request);
        let id = request.into_inner().schedule_id;
        let run = self
            .broker
            .trigger_schedule(&caller, &id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::TriggerScheduleResponse {
            run: Some(run_to_pb(run)),
        }))
    }

    async fn list_schedule_runs(
        &self,
        request: Request<pb::ListScheduleRunsRequest>,
    ) -> Result<Response<pb::ListScheduleRunsResponse>, Status> {
        let caller = caller(&request);
        let r = request.into_inner();
        let page = self
            .broker
            .list_schedule_runs(&caller, &r.schedule_id, r.page_size, &r.page_token)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::ListScheduleRunsResponse {
            runs: page.runs.into_iter().map(run_to_pb).collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn preview_schedule(
        &self,
        request: Request<pb::PreviewScheduleRequest>,
    ) -> Result<Response<pb::PreviewScheduleResponse>, Status> {
        let r = request.into_inner();
        let spec = spec_from_pb("", r.spec).map_err(invalid)?;
        let times = self
            .broker
            .preview_schedule(
                spec,
                ts("start_time", r.start_time.as_ref())?,
                ts("end_time", r.end_time.as_ref())?,
                ts("after", r.after.as_ref())?,
                r.count,
            )
            .map_err(status)?;
        Ok(Response::new(pb::PreviewScheduleResponse {
            fire_times: times.into_iter().map(to_timestamp).collect(),
        }))
    }
}
