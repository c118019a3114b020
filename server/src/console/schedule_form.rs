//! The form of a schedule, pure: filled from a stored schedule, and read back
//! into the service's `ScheduleInput` (and, for an edit, the update mask of the
//! fields that differ). The service validates the result (cron line, zone,
//! queue name, bounds); this only turns text into values, with one plain line
//! naming the field when it cannot.
//!
//! The task template's fields are `TemplateForm`: a new TaskTemplate field is
//! one field there, one line each in `from_template`, `input` and `canonical`,
//! and one label and input in `schedule_editor::template_fields`.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Deserialize;

use crate::domain::routing::{Fanout, Target};
use crate::domain::schedule::{Misfire, Overlap, Spec};
use crate::service::{RetrySpec, ScheduleInput, SpecInput, StickySpec, TemplateInput};
use crate::store::{ScheduleRecord, TaskTemplate};

/// The template's fields as text.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct TemplateForm {
    pub queue: String,
    pub payload: String,
    pub priority: String,
    pub max_attempts: String,
    pub deadline_after: String,
    /// One `key=value` per line.
    pub metadata: String,
    /// The key template (`{fire_time}`, `{schedule_id}`); blank: none.
    pub key: String,
    pub concurrency_key: String,
    /// Fan-out copies per fire; blank: one task.
    pub fanout: String,
    pub target_worker: String,
    /// One `key=value` per line.
    pub target_labels: String,
    /// `soft`, `hard` or blank (none).
    pub sticky: String,
    /// "1" when the payload comes from the inputs of the queue's payload
    /// schema (`payload_fields`), not from the payload textarea.
    pub payload_fields: String,
    /// The other inputs the browser sent (those of `payload_fields` among them).
    #[serde(flatten)]
    pub extra: BTreeMap<String, String>,
}

/// The schedule's fields as text (what the browser sends back).
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct ScheduleForm {
    pub schedule_id: String,
    /// `cron`, `every` or `once`.
    pub kind: String,
    pub cron: String,
    pub timezone: String,
    pub every: String,
    pub anchor: String,
    pub once_at: String,
    pub start_time: String,
    pub end_time: String,
    pub overlap: String,
    pub misfire: String,
    pub catchup_window: String,
    pub max_runs: String,
    /// A checkbox: "on" when ticked (create only; pause and resume are actions).
    pub paused: String,
    /// Set by the Preview button: show the preview, change nothing.
    pub preview: String,
    #[serde(flatten)]
    pub task: TemplateForm,
}

/// A spec with its window (start, end), as PreviewSchedule takes them.
pub type Window = (SpecInput, Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// A time as the console shows it (UTC).
pub fn time_text(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn duration_text(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// `2026-11-27 03:00`, `2026-11-27 03:00:00`, `2026-11-27T03:00` (UTC) or RFC 3339.
fn time(field: &str, s: &str) -> Result<Option<DateTime<Utc>>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    [
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    .map(|t| Some(t.and_utc()))
    .ok_or_else(|| format!("{field}: {s:?} is not a time (like 2026-01-31 09:00, UTC)"))
}

fn duration(field: &str, s: &str) -> Result<Option<Duration>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    humantime::parse_duration(s)
        .map(Some)
        .map_err(|_| format!("{field}: {s:?} is not a duration (like 30s, 15m or 1h 30m)"))
}

fn whole(field: &str, s: &str) -> Result<u32, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(0);
    }
    s.parse::<u32>()
        .map_err(|_| format!("{field}: {s:?} is not a whole number from 0 to 4294967295"))
}

fn metadata(s: &str) -> Result<BTreeMap<String, String>, String> {
    pairs("task.metadata", s)
}

/// `key=value` lines (metadata, target labels).
fn pairs(field: &str, s: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for line in s.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (k, v) = line
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| format!("{field}: {line:?} is not a line key=value"))?;
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

/// `key=value` lines in key order.
fn lines(m: &BTreeMap<String, String>) -> String {
    m.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// A trimmed text field; blank: none.
fn text(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

impl TemplateForm {
    /// The fields as values mean them: trimmed, line ends as `\n` (a browser
    /// sends `\r\n`), metadata in key order; what an edit compares.
    fn canonical(&self) -> TemplateForm {
        TemplateForm {
            queue: self.queue.trim().into(),
            payload: self.payload.replace("\r\n", "\n"),
            priority: self.priority.trim().trim_start_matches('+').into(),
            max_attempts: self.max_attempts.trim().into(),
            deadline_after: self.deadline_after.trim().into(),
            metadata: match metadata(&self.metadata) {
                Ok(m) => lines(&m),
                Err(_) => self.metadata.clone(),
            },
            key: self.key.trim().into(),
            concurrency_key: self.concurrency_key.trim().into(),
            fanout: self.fanout.trim().into(),
            target_worker: self.target_worker.trim().into(),
            target_labels: match pairs("task.target_labels", &self.target_labels) {
                Ok(m) => lines(&m),
                Err(_) => self.target_labels.clone(),
            },
            sticky: self.sticky.trim().into(),
            payload_fields: String::new(),
            extra: BTreeMap::new(),
        }
    }

    /// Whether the payload field still shows `shown` (line ends aside).
    pub fn payload_is(&self, shown: &str) -> bool {
        self.payload.replace("\r\n", "\n") == shown.replace("\r\n", "\n")
    }

    pub fn from_template(t: &TaskTemplate) -> Self {
        TemplateForm {
            queue: t.queue.clone(),
            payload: String::from_utf8_lossy(&t.payload).into_owned(),
            priority: t.priority.to_string(),
            max_attempts: t.retry.max_attempts.to_string(),
            deadline_after: t.deadline_after.map(duration_text).unwrap_or_default(),
            metadata: lines(&t.metadata),
            key: t.key.clone().unwrap_or_default(),
            concurrency_key: t.concurrency_key.clone().unwrap_or_default(),
            fanout: t.fanout.map(|f| f.copies.to_string()).unwrap_or_default(),
            target_worker: t.target.worker_id.clone().unwrap_or_default(),
            target_labels: lines(&t.target.labels),
            sticky: t.sticky.map(|s| s.as_str().to_string()).unwrap_or_default(),
            ..TemplateForm::default()
        }
    }

    pub fn input(&self) -> Result<TemplateInput, String> {
        let priority = self.priority.trim();
        // The bucket rides in the metadata the form shows.
        let mut meta = metadata(&self.metadata)?;
        let bucket = meta.remove(crate::domain::bucket::BUCKET_KEY);
        Ok(TemplateInput {
            bucket,
            queue: self.queue.trim().to_string(),
            payload: self.payload.clone().into_bytes(),
            priority: if priority.is_empty() {
                0
            } else {
                priority
                    .parse()
                    .map_err(|_| format!("task.priority: {priority:?} is not a whole number"))?
            },
            retry: RetrySpec {
                max_attempts: match whole("task.max_attempts", &self.max_attempts)? {
                    0 => None,
                    n => Some(n),
                },
                ..RetrySpec::default()
            },
            metadata: meta,
            deadline_after: duration("task.deadline_after", &self.deadline_after)?,
            key: text(&self.key),
            concurrency_key: text(&self.concurrency_key),
            fanout: match whole("task.fanout", &self.fanout)? {
                0 => None,
                copies => Some(Fanout {
                    copies,
                    distinct_workers: false,
                }),
            },
            target: Target {
                worker_id: text(&self.target_worker),
                labels: pairs("task.target_labels", &self.target_labels)?,
            },
            sticky: match self.sticky.trim() {
                "" => None,
                "soft" => Some(StickySpec::Soft { timeout: None }),
                "hard" => Some(StickySpec::Hard),
                other => return Err(format!("task.sticky: {other:?} is not soft or hard")),
            },
        })
    }
}

impl ScheduleForm {
    /// An empty form for a new schedule, with the API's defaults chosen.
    pub fn blank() -> Self {
        ScheduleForm {
            kind: "cron".into(),
            overlap: Overlap::Skip.as_str().into(),
            misfire: Misfire::FireOnce.as_str().into(),
            task: TemplateForm {
                priority: "0".into(),
                ..TemplateForm::default()
            },
            ..ScheduleForm::default()
        }
    }

    pub fn from_record(s: &ScheduleRecord) -> Self {
        let mut f = ScheduleForm {
            schedule_id: s.id.clone(),
            start_time: s.start_time.map(time_text).unwrap_or_default(),
            end_time: s.end_time.map(time_text).unwrap_or_default(),
            overlap: s.overlap.as_str().into(),
            misfire: s.misfire.as_str().into(),
            catchup_window: duration_text(s.catchup_window),
            max_runs: if s.max_runs == 0 {
                String::new()
            } else {
                s.max_runs.to_string()
            },
            paused: if s.paused { "on".into() } else { String::new() },
            task: TemplateForm::from_template(&s.template),
            ..ScheduleForm::default()
        };
        match &s.spec {
            Spec::Cron { expr, timezone } => {
                f.kind = "cron".into();
                f.cron = expr.clone();
                f.timezone = timezone.clone();
            }
            Spec::Every { every, anchor } => {
                f.kind = "every".into();
                f.every = duration_text(*every);
                f.anchor = time_text(*anchor);
            }
            Spec::Once { at } => {
                f.kind = "once".into();
                f.once_at = time_text(*at);
            }
        }
        f
    }

    /// The spec and the window, as PreviewSchedule takes them.
    pub fn spec(&self) -> Result<Window, String> {
        let spec = match self.kind.trim() {
            "" | "cron" => {
                if self.cron.trim().is_empty() {
                    return Err("spec.cron: is required (like 0 3 * * *)".into());
                }
                SpecInput::Cron {
                    expr: self.cron.trim().to_string(),
                    timezone: self.timezone.trim().to_string(),
                }
            }
            "every" => SpecInput::Every {
                every: duration("spec.every", &self.every)?
                    .ok_or("spec.every: is required (like 15m)")?,
                anchor: time("spec.anchor", &self.anchor)?,
            },
            "once" => SpecInput::Once {
                at: time("spec.once_at", &self.once_at)?
                    .ok_or("spec.once_at: is required (like 2026-01-31 09:00)")?,
            },
            other => return Err(format!("spec: {other:?} is not cron, every or once")),
        };
        Ok((
            spec,
            time("start_time", &self.start_time)?,
            time("end_time", &self.end_time)?,
        ))
    }

    /// The whole schedule, for CreateSchedule (and UpdateSchedule with a mask).
    pub fn input(&self) -> Result<ScheduleInput, String> {
        let (spec, start_time, end_time) = self.spec()?;
        let choice = |field: &str, s: &str| format!("{field}: {s:?} is not one of the choices");
        Ok(ScheduleInput {
            schedule_id: self.schedule_id.trim().to_string(),
            spec: Some(spec),
            start_time,
            end_time,
            task: Some(self.task.input()?),
            overlap: match self.overlap.trim() {
                "" => Overlap::Skip,
                s => Overlap::parse(s).ok_or_else(|| choice("overlap", s))?,
            },
            misfire: match self.misfire.trim() {
                "" => Misfire::FireOnce,
                s => Misfire::parse(s).ok_or_else(|| choice("misfire", s))?,
            },
            catchup_window: duration("catchup_window", &self.catchup_window)?,
            paused: !self.paused.is_empty(),
            max_runs: whole("max_runs", &self.max_runs)?,
        })
    }

    /// The update mask of an edit: the fields whose text differs from `current`'s
    /// form (pause and resume are actions of their own, not part of the edit).
    pub fn changed(&self, current: &ScheduleForm) -> Vec<String> {
        let spec = |f: &ScheduleForm| {
            let k = f.kind.trim();
            let cron = k == "cron" || k.is_empty();
            let pick = |s: &str| {
                if cron {
                    s.trim().to_string()
                } else {
                    String::new()
                }
            };
            (
                k.to_string(),
                pick(&f.cron),
                pick(&f.timezone),
                (k == "every").then(|| (f.every.trim().to_string(), f.anchor.trim().to_string())),
                (k == "once").then(|| f.once_at.trim().to_string()),
            )
        };
        let differs = [
            ("spec", spec(self) != spec(current)),
            (
                "start_time",
                self.start_time.trim() != current.start_time.trim(),
            ),
            ("end_time", self.end_time.trim() != current.end_time.trim()),
            ("task", self.task.canonical() != current.task.canonical()),
            ("overlap", self.overlap.trim() != current.overlap.trim()),
            ("misfire", self.misfire.trim() != current.misfire.trim()),
            (
                "catchup_window",
                self.catchup_window.trim() != current.catchup_window.trim(),
            ),
            ("max_runs", self.max_runs.trim() != current.max_runs.trim()),
        ];
        differs
            .into_iter()
            .filter(|(_, d)| *d)
            .map(|(p, _)| p.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron_form() -> ScheduleForm {
        ScheduleForm {
            schedule_id: "nightly".into(),
            cron: "0 3 * * *".into(),
            timezone: "Europe/Berlin".into(),
            task: TemplateForm {
                queue: "emails".into(),
                payload: "{\"a\":1}".into(),
                priority: "5".into(),
                metadata: "team = ops\n\nnote=a=b\n".into(),
                deadline_after: "10m".into(),
                ..TemplateForm::default()
            },
            ..ScheduleForm::blank()
        }
    }

    #[test]
    fn a_form_reads_into_the_services_input() {
        let i = cron_form().input().unwrap();
        assert!(
            matches!(&i.spec, Some(SpecInput::Cron { expr, timezone }) if expr == "0 3 * * *" && timezone == "Europe/Berlin")
        );
        let t = i.task.unwrap();
        assert_eq!(t.priority, 5);
        assert_eq!(t.payload, b"{\"a\":1}");
        assert_eq!(t.metadata["team"], "ops");
        assert_eq!(t.metadata["note"], "a=b");
        assert_eq!(t.deadline_after, Some(Duration::from_secs(600)));
        assert_eq!(i.overlap, Overlap::Skip);
        assert_eq!(i.misfire, Misfire::FireOnce);
        assert!(!i.paused);

        let every = ScheduleForm {
            kind: "every".into(),
            every: "15m".into(),
            anchor: "2026-01-01 00:00".into(),
            ..cron_form()
        };
        let (spec, ..) = every.spec().unwrap();
        assert!(matches!(spec, SpecInput::Every { every, anchor: Some(a) }
            if every == Duration::from_secs(900) && a.to_rfc3339() == "2026-01-01T00:00:00+00:00"));
    }

    #[test]
    fn bad_text_is_one_line_naming_the_field() {
        let bad = |f: ScheduleForm| f.input().unwrap_err();
        for (form, field) in [
            (
                ScheduleForm {
                    cron: " ".into(),
                    ..cron_form()
                },
                "spec.cron:",
            ),
            (
                ScheduleForm {
                    kind: "every".into(),
                    every: "often".into(),
                    ..cron_form()
                },
                "spec.every:",
            ),
            (
                ScheduleForm {
                    start_time: "tomorrow".into(),
                    ..cron_form()
                },
                "start_time:",
            ),
            (
                ScheduleForm {
                    misfire: "never".into(),
                    ..cron_form()
                },
                "misfire:",
            ),
            (
                ScheduleForm {
                    max_runs: "-1".into(),
                    ..cron_form()
                },
                "max_runs:",
            ),
            (
                ScheduleForm {
                    task: TemplateForm {
                        metadata: "no equals sign".into(),
                        ..cron_form().task
                    },
                    ..cron_form()
                },
                "task.metadata:",
            ),
            (
                ScheduleForm {
                    task: TemplateForm {
                        priority: "high".into(),
                        ..cron_form().task
                    },
                    ..cron_form()
                },
                "task.priority:",
            ),
        ] {
            let e = bad(form);
            assert!(e.starts_with(field), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn only_changed_fields_are_in_the_mask() {
        let a = cron_form();
        assert!(a.changed(&a).is_empty());
        let same = ScheduleForm {
            task: TemplateForm {
                metadata: "note=a=b\r\nteam=ops".into(),
                priority: " 5".into(),
                ..a.task.clone()
            },
            ..a.clone()
        };
        assert!(same.changed(&a).is_empty(), "{:?}", same.changed(&a));
        let b = ScheduleForm {
            cron: "0 4 * * *".into(),
            max_runs: "3".into(),
            task: TemplateForm {
                priority: "1".into(),
                ..a.task.clone()
            },
            // Text of another kind's fields does not count.
            every: "5m".into(),
            ..a.clone()
        };
        assert_eq!(b.changed(&a), ["spec", "task", "max_runs"]);
    }
}
