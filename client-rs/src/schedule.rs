//! Schedules: [`Client::schedules`] returns [`Schedules`], the calls of
//! `ScheduleService`; [`NewSchedule`] builds a schedule (a cron line, an interval
//! or a one-off time, the task to make, and the policies).
//!
//! ```no_run
//! use std::time::Duration;
//! use taskbroker_client::{Client, NewSchedule};
//!
//! # async fn demo() -> Result<(), taskbroker_client::Error> {
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let nightly = NewSchedule::cron("nightly", "0 3 * * *")
//!     .timezone("Europe/Berlin")
//!     .queue("reports")
//!     .payload(br#"{"kind":"daily"}"#.to_vec());
//! client.schedules().create(nightly).await?;
//! for t in client.schedules().preview(NewSchedule::cron_spec("*/15 9-17 * * MON-FRI", "America/New_York"), 5).await? {
//!     println!("{t:?}");
//! }
//! # Ok(()) }
//! ```

use std::time::{Duration, SystemTime};

use futures::Stream;

use crate::pb::{self, MisfirePolicy, OverlapPolicy};
use crate::time::{from_proto_timestamp, to_proto_duration, to_proto_timestamp};
use crate::{Client, Error};

/// A schedule to create (or the new values of an update).
#[derive(Debug, Clone)]
pub struct NewSchedule {
    inner: pb::Schedule,
}

fn template(s: &mut pb::Schedule) -> &mut pb::TaskTemplate {
    s.task.get_or_insert_with(Default::default)
}

impl NewSchedule {
    /// A schedule with any spec (see [`cron_spec`](Self::cron_spec) and the others).
    pub fn with_spec(id: impl Into<String>, spec: pb::ScheduleSpec) -> Self {
        NewSchedule {
            inner: pb::Schedule {
                schedule_id: id.into(),
                spec: Some(spec),
                ..Default::default()
            },
        }
    }

    /// The new values of an update that leaves the spec alone.
    pub fn for_update(id: impl Into<String>) -> Self {
        NewSchedule {
            inner: pb::Schedule {
                schedule_id: id.into(),
                ..Default::default()
            },
        }
    }

    /// A cron spec: 5 fields (minute hour day-of-month month day-of-week) or 6
    /// (seconds first), read in `timezone` (an IANA name; "" is UTC).
    pub fn cron_spec(line: impl Into<String>, timezone: impl Into<String>) -> pb::ScheduleSpec {
        pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Cron(line.into())),
            timezone: timezone.into(),
            anchor: None,
        }
    }

    /// An interval spec (at least 1 s), anchored when the schedule is created.
    pub fn every_spec(every: Duration) -> pb::ScheduleSpec {
        pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Every(to_proto_duration(every))),
            ..Default::default()
        }
    }

    /// A one-off spec.
    pub fn once_spec(at: SystemTime) -> pb::ScheduleSpec {
        pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::OnceAt(to_proto_timestamp(at))),
            ..Default::default()
        }
    }

    /// Fires on a cron line (UTC unless [`timezone`](Self::timezone) says otherwise).
    pub fn cron(id: impl Into<String>, line: impl Into<String>) -> Self {
        Self::with_spec(id, Self::cron_spec(line, ""))
    }

    /// Fires every `every`.
    pub fn every(id: impl Into<String>, every: Duration) -> Self {
        Self::with_spec(id, Self::every_spec(every))
    }

    /// Fires once, at `at`.
    pub fn once(id: impl Into<String>, at: SystemTime) -> Self {
        Self::with_spec(id, Self::once_spec(at))
    }

    /// The IANA zone a cron line is read in, e.g. `Europe/Berlin`.
    pub fn timezone(mut self, tz: impl Into<String>) -> Self {
        if let Some(s) = self.inner.spec.as_mut() {
            s.timezone = tz.into();
        }
        self
    }

    /// The phase of an `every` spec: fires at anchor + k * every.
    pub fn anchor(mut self, t: SystemTime) -> Self {
        if let Some(s) = self.inner.spec.as_mut() {
            s.anchor = Some(to_proto_timestamp(t));
        }
        self
    }

    /// Nothing fires before `t`.
    pub fn start_time(mut self, t: SystemTime) -> Self {
        self.inner.start_time = Some(to_proto_timestamp(t));
        self
    }

    /// Nothing fires after `t`; the schedule completes then.
    pub fn end_time(mut self, t: SystemTime) -> Self {
        self.inner.end_time = Some(to_proto_timestamp(t));
        self
    }

    /// The queue of the tasks it makes (required).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        template(&mut self.inner).queue = queue.into();
        self
    }

    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        template(&mut self.inner).payload = payload.into();
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        template(&mut self.inner).priority = priority;
        self
    }

    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        template(&mut self.inner)
            .metadata
            .insert(key.into(), value.into());
        self
    }

    pub fn retry(mut self, retry: pb::RetryPolicy) -> Self {
        template(&mut self.inner).retry = Some(retry);
        self
    }

    /// Each task must finish this long after it is made.
    pub fn deadline_after(mut self, d: Duration) -> Self {
        template(&mut self.inner).deadline_after = Some(to_proto_duration(d));
        self
    }

    /// Only the worker with this id may lease the tasks it makes (routing).
    pub fn target_worker(mut self, worker_id: impl Into<String>) -> Self {
        template(&mut self.inner)
            .target
            .get_or_insert_with(Default::default)
            .worker_id = worker_id.into();
        self
    }

    /// Only a worker carrying this label may lease the tasks it makes; call
    /// again to require more.
    pub fn target_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        template(&mut self.inner)
            .target
            .get_or_insert_with(Default::default)
            .labels
            .insert(key.into(), value.into());
        self
    }

    /// Keeps a retry of each task it makes for the worker that failed it.
    pub fn sticky(mut self, sticky: crate::Sticky) -> Self {
        template(&mut self.inner).sticky = Some(sticky.into());
        self
    }

    /// Each fire makes `copies` tasks sharing a fan-out group; with
    /// `distinct_workers` no worker runs two of them.
    pub fn fanout(mut self, copies: u32, distinct_workers: bool) -> Self {
        template(&mut self.inner).fanout = Some(pb::Fanout {
            copies,
            distinct_workers,
        });
        self
    }

    /// The concurrency key of each task it makes.
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        template(&mut self.inner).concurrency_key = key.into();
        self
    }

    /// The key of each task it makes, with `{fire_time}` and `{schedule_id}`
    /// substituted (e.g. `"report-{fire_time}"`): a fire whose key is taken
    /// makes no task.
    pub fn key(mut self, template_key: impl Into<String>) -> Self {
        template(&mut self.inner).key = template_key.into();
        self
    }

    /// While the previous run's task is unfinished. Default: skip.
    pub fn overlap(mut self, policy: OverlapPolicy) -> Self {
        self.inner.overlap = policy as i32;
        self
    }

    /// For fire times missed while no broker ran. Default: fire once.
    pub fn misfire(mut self, policy: MisfirePolicy) -> Self {
        self.inner.misfire = policy as i32;
        self
    }

    /// How far back CATCH_UP goes. Default 1 h.
    pub fn catchup_window(mut self, d: Duration) -> Self {
        self.inner.catchup_window = Some(to_proto_duration(d));
        self
    }

    /// Create it paused.
    pub fn paused(mut self, paused: bool) -> Self {
        self.inner.paused = paused;
        self
    }

    /// Stop after this many runs.
    pub fn max_runs(mut self, n: u32) -> Self {
        self.inner.max_runs = n;
        self
    }

    pub fn into_proto(self) -> pb::Schedule {
        self.inner
    }
}

/// The calls of `ScheduleService`; from [`Client::schedules`].
#[derive(Debug, Clone)]
pub struct Schedules {
    client: Client,
}

fn schedule(s: Option<pb::Schedule>) -> Result<pb::Schedule, Error> {
    s.ok_or(Error::Malformed("schedule"))
}

impl Client {
    /// Schedule calls on this client's channel.
    pub fn schedules(&self) -> Schedules {
        Schedules {
            client: self.clone(),
        }
    }
}

impl Schedules {
    fn stub(
        &self,
    ) -> pb::schedule_service_client::ScheduleServiceClient<tonic::transport::Channel> {
        self.client.schedule_stub()
    }

    fn req<T>(&self, m: T) -> tonic::Request<T> {
        self.client.request(m)
    }

    /// Creates a schedule; ALREADY_EXISTS when the id is taken.
    pub async fn create(&self, s: NewSchedule) -> Result<pb::Schedule, Error> {
        let req = pb::CreateScheduleRequest {
            schedule: Some(s.inner),
        };
        schedule(
            self.stub()
                .create_schedule(self.req(req))
                .await?
                .into_inner()
                .schedule,
        )
    }

    pub async fn get(&self, id: &str) -> Result<pb::Schedule, Error> {
        let req = pb::GetScheduleRequest {
            schedule_id: id.into(),
        };
        schedule(
            self.stub()
                .get_schedule(self.req(req))
                .await?
                .into_inner()
                .schedule,
        )
    }

    /// One page of schedules (by id) and the next page's token (empty on the last).
    pub async fn list_page(
        &self,
        page_size: i32,
        token: &str,
    ) -> Result<(Vec<pb::Schedule>, String), Error> {
        let req = pb::ListSchedulesRequest {
            page_size,
            page_token: token.into(),
        };
        let r = self
            .stub()
            .list_schedules(self.req(req))
            .await?
            .into_inner();
        Ok((r.schedules, r.next_page_token))
    }

    /// Every schedule, fetched a page at a time as the stream is read.
    pub fn list(&self) -> impl Stream<Item = Result<pb::Schedule, Error>> + Send + 'static {
        use futures::{StreamExt, TryStreamExt};
        let start = (self.clone(), Some(String::new()));
        futures::stream::try_unfold(start, |(s, token)| async move {
            let Some(token) = token else {
                return Ok::<_, Error>(None);
            };
            let (page, next) = s.list_page(0, &token).await?;
            let next = (!next.is_empty()).then_some(next);
            Ok(Some((
                futures::stream::iter(page.into_iter().map(Ok)),
                (s, next),
            )))
        })
        .try_flatten()
        .boxed()
    }

    /// Changes the fields named in `paths` (spec, start_time, end_time, task,
    /// overlap, misfire, catchup_window, max_runs, paused) to their values in `s`.
    pub async fn update(&self, s: NewSchedule, paths: &[&str]) -> Result<pb::Schedule, Error> {
        let req = pb::UpdateScheduleRequest {
            schedule: Some(s.inner),
            update_mask: Some(prost_types::FieldMask {
                paths: paths.iter().map(|p| p.to_string()).collect(),
            }),
        };
        schedule(
            self.stub()
                .update_schedule(self.req(req))
                .await?
                .into_inner()
                .schedule,
        )
    }

    pub async fn pause(&self, id: &str) -> Result<pb::Schedule, Error> {
        let req = pb::PauseScheduleRequest {
            schedule_id: id.into(),
        };
        schedule(
            self.stub()
                .pause_schedule(self.req(req))
                .await?
                .into_inner()
                .schedule,
        )
    }

    /// Resumes; fire times that passed while paused are skipped.
    pub async fn resume(&self, id: &str) -> Result<pb::Schedule, Error> {
        let req = pb::ResumeScheduleRequest {
            schedule_id: id.into(),
        };
        schedule(
            self.stub()
                .resume_schedule(self.req(req))
                .await?
                .into_inner()
                .schedule,
        )
    }

    /// Deletes the schedule and its run history (tasks already made stay).
    pub async fn delete(&self, id: &str) -> Result<(), Error> {
        let req = pb::DeleteScheduleRequest {
            schedule_id: id.into(),
        };
        self.stub().delete_schedule(self.req(req)).await?;
        Ok(())
    }

    /// Fires once now, outside the spec.
    pub async fn trigger(&self, id: &str) -> Result<pb::ScheduleRun, Error> {
        let req = pb::TriggerScheduleRequest {
            schedule_id: id.into(),
        };
        self.stub()
            .trigger_schedule(self.req(req))
            .await?
            .into_inner()
            .run
            .ok_or(Error::Malformed("run"))
    }

    /// The newest `limit` runs (1 to 1000), newest first.
    pub async fn runs(&self, id: &str, limit: i32) -> Result<Vec<pb::ScheduleRun>, Error> {
        let req = pb::ListScheduleRunsRequest {
            schedule_id: id.into(),
            page_size: limit,
            page_token: String::new(),
        };
        Ok(self
            .stub()
            .list_schedule_runs(self.req(req))
            .await?
            .into_inner()
            .runs)
    }

    /// The next `count` fire times of a spec (1 to 1000), creating nothing.
    pub async fn preview(
        &self,
        spec: pb::ScheduleSpec,
        count: i32,
    ) -> Result<Vec<SystemTime>, Error> {
        let req = pb::PreviewScheduleRequest {
            spec: Some(spec),
            count,
            ..Default::default()
        };
        let r = self
            .stub()
            .preview_schedule(self.req(req))
            .await?
            .into_inner();
        Ok(r.fire_times
            .iter()
            .filter_map(|t| from_proto_timestamp(Some(t)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_fills_spec_and_template() {
        let s = NewSchedule::cron("nightly", "0 3 * * *")
            .timezone("Europe/Berlin")
            .queue("reports")
            .metadata("k", "v")
            .overlap(OverlapPolicy::BufferOne)
            .max_runs(3)
            .into_proto();
        let spec = s.spec.unwrap();
        assert_eq!(spec.timezone, "Europe/Berlin");
        assert_eq!(
            spec.kind,
            Some(pb::schedule_spec::Kind::Cron("0 3 * * *".into()))
        );
        let t = s.task.unwrap();
        assert_eq!(t.queue, "reports");
        assert_eq!(t.metadata["k"], "v");
        assert_eq!(s.overlap, OverlapPolicy::BufferOne as i32);
        assert_eq!(s.max_runs, 3);
    }
}
