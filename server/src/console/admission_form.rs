//! The form of a queue's main limits, pure: filled from a stored config, and
//! read back into the changed fields (an UpdateQueue patch and its mask). A
//! post changes only the fields it carries (one it leaves out keeps the
//! stored value), and removing the payload schema takes its own checkbox. The
//! service validates the result against the broker's limits; this only turns
//! text into numbers, one plain line naming the field when it cannot.

use std::time::Duration;

use serde::Deserialize;

use crate::domain::admission::{Fairness, QueueConfig, RateLimit};

/// The form's fields as text, filled in from the stored config or a post.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct QueueForm {
    pub max_concurrent: String,
    pub rate_per_second: String,
    pub rate_burst: String,
    pub max_concurrent_per_key: String,
    pub key_rate_per_second: String,
    pub key_rate_burst: String,
    pub fairness: String,
    pub priority_aging: String,
    pub max_leases_per_worker: String,
    pub max_attempts: String,
    /// The JSON Schema document payloads must match; blank: none (a stored
    /// one is only removed with `remove_payload_schema`).
    pub payload_schema: String,
    /// The "Remove the payload schema" checkbox.
    pub remove_payload_schema: bool,
}

/// What a browser posts: each field it carries, as text. A field it leaves
/// out (a page from an older broker, a script posting a few fields) keeps the
/// queue's stored value.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct QueuePost {
    pub max_concurrent: Option<String>,
    pub rate_per_second: Option<String>,
    pub rate_burst: Option<String>,
    pub max_concurrent_per_key: Option<String>,
    pub key_rate_per_second: Option<String>,
    pub key_rate_burst: Option<String>,
    pub fairness: Option<String>,
    pub priority_aging: Option<String>,
    pub max_leases_per_worker: Option<String>,
    pub max_attempts: Option<String>,
    pub payload_schema: Option<String>,
    /// Present (any value) when the box is ticked.
    pub remove_payload_schema: Option<String>,
}

impl QueuePost {
    /// The form as posted, each missing field filled from `current`.
    pub fn over(self, current: &QueueConfig) -> QueueForm {
        let c = QueueForm::from_config(current);
        QueueForm {
            max_concurrent: self.max_concurrent.unwrap_or(c.max_concurrent),
            rate_per_second: self.rate_per_second.unwrap_or(c.rate_per_second),
            rate_burst: self.rate_burst.unwrap_or(c.rate_burst),
            max_concurrent_per_key: self
                .max_concurrent_per_key
                .unwrap_or(c.max_concurrent_per_key),
            key_rate_per_second: self.key_rate_per_second.unwrap_or(c.key_rate_per_second),
            key_rate_burst: self.key_rate_burst.unwrap_or(c.key_rate_burst),
            fairness: self.fairness.unwrap_or(c.fairness),
            priority_aging: self.priority_aging.unwrap_or(c.priority_aging),
            max_leases_per_worker: self
                .max_leases_per_worker
                .unwrap_or(c.max_leases_per_worker),
            max_attempts: self.max_attempts.unwrap_or(c.max_attempts),
            payload_schema: self.payload_schema.unwrap_or(c.payload_schema),
            remove_payload_schema: self.remove_payload_schema.is_some(),
        }
    }
}

fn cap(n: u32) -> String {
    if n == 0 { String::new() } else { n.to_string() }
}

fn rate_fields(r: Option<RateLimit>) -> (String, String) {
    match r {
        None => (String::new(), String::new()),
        Some(r) => (r.per_second.to_string(), cap(r.burst)),
    }
}

fn whole(field: &str, s: &str) -> Result<u32, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(0);
    }
    s.parse::<u32>()
        .map_err(|_| format!("{field}: {s:?} is not a whole number from 0 to 4294967295"))
}

fn rate(field: &str, per_second: &str, burst: &str) -> Result<Option<RateLimit>, String> {
    let (p, b) = (per_second.trim(), burst.trim());
    if p.is_empty() || p == "0" {
        if !b.is_empty() && b != "0" {
            return Err(format!(
                "{field} burst: needs a rate (leases per second) too"
            ));
        }
        return Ok(None);
    }
    let per_second = p
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("{field}: {p:?} is not a number of leases per second"))?;
    Ok(Some(RateLimit {
        per_second,
        burst: whole(&format!("{field} burst"), b)?,
    }))
}

impl QueueForm {
    pub fn from_config(c: &QueueConfig) -> Self {
        let (rate_per_second, rate_burst) = rate_fields(c.rate_limit);
        let (key_rate_per_second, key_rate_burst) = rate_fields(c.per_key_rate_limit);
        QueueForm {
            max_concurrent: cap(c.max_concurrent),
            rate_per_second,
            rate_burst,
            max_concurrent_per_key: cap(c.max_concurrent_per_key),
            key_rate_per_second,
            key_rate_burst,
            fairness: match c.fairness {
                Fairness::None => "none".into(),
                Fairness::RoundRobinKeys => "round_robin_keys".into(),
            },
            priority_aging: c
                .priority_aging_ms
                .filter(|ms| *ms > 0)
                .map(|ms| humantime::format_duration(Duration::from_millis(ms)).to_string())
                .unwrap_or_default(),
            max_leases_per_worker: cap(c.max_leases_per_worker),
            max_attempts: c
                .retry
                .max_attempts
                .map(|n| n.to_string())
                .unwrap_or_default(),
            payload_schema: c.payload_schema.clone().unwrap_or_default(),
            remove_payload_schema: false,
        }
    }

    /// The payload schema the form asks for, `stored` being the queue's: the
    /// box removes it; a blank text while one is stored is refused (it would
    /// remove it without the box, e.g. from a page shown before it was set).
    fn schema(&self, stored: Option<&str>) -> Result<Option<String>, String> {
        if self.remove_payload_schema {
            return Ok(None);
        }
        // A browser sends line ends as CRLF: the same text is no change.
        let lines = |s: &str| s.replace("\r\n", "\n").trim().to_string();
        let typed = lines(&self.payload_schema);
        match stored {
            Some(s) if typed == lines(s) => Ok(Some(s.to_string())),
            Some(_) if typed.is_empty() => Err("payload schema: blank while the queue has one; \
                 tick \"Remove the payload schema\" to remove it"
                .into()),
            _ => Ok((!typed.is_empty()).then_some(typed)),
        }
    }

    /// The patch and the update mask of the fields that differ from `current`
    /// (an empty mask: nothing changed). Errors are one line naming the field.
    pub fn changes(&self, current: &QueueConfig) -> Result<(QueueConfig, Vec<String>), String> {
        let mut p = current.clone();
        p.max_concurrent = whole("max concurrent", &self.max_concurrent)?;
        p.rate_limit = rate("rate limit", &self.rate_per_second, &self.rate_burst)?;
        p.max_concurrent_per_key = whole("max concurrent per key", &self.max_concurrent_per_key)?;
        p.per_key_rate_limit = rate(
            "rate limit per key",
            &self.key_rate_per_second,
            &self.key_rate_burst,
        )?;
        p.fairness = match self.fairness.trim() {
            "" | "none" => Fairness::None,
            "round_robin_keys" => Fairness::RoundRobinKeys,
            other => return Err(format!("fairness: {other:?} is not one of the choices")),
        };
        let aging = self.priority_aging.trim();
        p.priority_aging_ms = match aging {
            "" | "0" | "off" => None,
            s => {
                let d = humantime::parse_duration(s).map_err(|_| {
                    format!("priority aging: {s:?} is not a duration (like 30s or 5m)")
                })?;
                if d.is_zero() {
                    None
                } else {
                    Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                }
            }
        };
        p.max_leases_per_worker = whole("max leases per worker", &self.max_leases_per_worker)?;
        p.retry.max_attempts = match whole("max attempts", &self.max_attempts)? {
            0 => None,
            n => Some(n),
        };
        p.payload_schema = self.schema(current.payload_schema.as_deref())?;
        let c = current;
        let mut paths = Vec::new();
        let mut changed = |differs: bool, path: &str| {
            if differs {
                paths.push(path.to_string());
            }
        };
        changed(p.max_concurrent != c.max_concurrent, "max_concurrent");
        changed(p.rate_limit != c.rate_limit, "rate_limit");
        changed(
            p.max_concurrent_per_key != c.max_concurrent_per_key,
            "max_concurrent_per_key",
        );
        changed(
            p.per_key_rate_limit != c.per_key_rate_limit,
            "per_key_rate_limit",
        );
        changed(p.fairness != c.fairness, "fairness");
        changed(p.priority_aging_ms != c.priority_aging_ms, "priority_aging");
        changed(
            p.max_leases_per_worker != c.max_leases_per_worker,
            "max_leases_per_worker",
        );
        changed(
            p.retry.max_attempts != c.retry.max_attempts,
            "default_retry.max_attempts",
        );
        changed(p.payload_schema != c.payload_schema, "payload_schema");
        Ok((p, paths))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_round_trips_through_the_form_unchanged() {
        let c = QueueConfig {
            max_concurrent: 4,
            rate_limit: Some(RateLimit {
                per_second: 2.5,
                burst: 5,
            }),
            fairness: Fairness::RoundRobinKeys,
            priority_aging_ms: Some(30_000),
            max_leases_per_worker: 2,
            ..QueueConfig::default()
        };
        let form = QueueForm::from_config(&c);
        assert_eq!(form.priority_aging, "30s");
        let (patch, paths) = form.changes(&c).unwrap();
        assert!(paths.is_empty(), "{paths:?}");
        assert_eq!(patch, c);
    }

    #[test]
    fn only_the_changed_fields_are_in_the_mask() {
        let c = QueueConfig::default();
        let form = QueueForm {
            max_concurrent: " 3 ".into(),
            key_rate_per_second: "0.5".into(),
            priority_aging: "1m".into(),
            max_attempts: "7".into(),
            ..QueueForm::from_config(&c)
        };
        let (p, paths) = form.changes(&c).unwrap();
        assert_eq!(
            paths,
            [
                "max_concurrent",
                "per_key_rate_limit",
                "priority_aging",
                "default_retry.max_attempts"
            ]
        );
        assert_eq!(p.max_concurrent, 3);
        assert_eq!(p.per_key_rate_limit.unwrap().per_second, 0.5);
        assert_eq!(p.priority_aging_ms, Some(60_000));
        assert_eq!(p.retry.max_attempts, Some(7));
    }

    #[test]
    fn a_payload_schema_is_set_kept_across_line_ends_and_removed_by_the_box() {
        let c = QueueConfig {
            payload_schema: Some("{\n  \"type\": \"object\"\n}".into()),
            ..QueueConfig::default()
        };
        let form = QueueForm::from_config(&c);
        let crlf = QueueForm {
            payload_schema: form.payload_schema.replace('\n', "\r\n"),
            ..form.clone()
        };
        assert!(crlf.changes(&c).unwrap().1.is_empty());
        let blank = QueueForm {
            payload_schema: "  ".into(),
            ..form.clone()
        };
        let e = blank.changes(&c).unwrap_err();
        assert!(
            e.starts_with("payload schema: blank while the queue has one"),
            "{e}"
        );
        let removed = QueueForm {
            remove_payload_schema: true,
            ..form.clone()
        };
        let (p, paths) = removed.changes(&c).unwrap();
        assert_eq!(paths, ["payload_schema"]);
        assert_eq!(p.payload_schema, None);
        let set = QueueForm {
            payload_schema: "true".into(),
            ..form
        };
        assert_eq!(
            set.changes(&c).unwrap().0.payload_schema.as_deref(),
            Some("true")
        );
        let none = QueueConfig::default();
        let blank = QueueForm::from_config(&none);
        assert!(blank.changes(&none).unwrap().1.is_empty());
    }

    #[test]
    fn a_post_changes_only_the_fields_it_carries() {
        let c = QueueConfig {
            max_concurrent: 4,
            rate_limit: Some(RateLimit {
                per_second: 2.5,
                burst: 5,
            }),
            fairness: Fairness::RoundRobinKeys,
            priority_aging_ms: Some(30_000),
            max_leases_per_worker: 2,
            bucket: Some("partner-api".into()),
            payload_schema: Some("{\"type\":\"object\"}".into()),
            ..QueueConfig::default()
        };
        let (p, paths) = QueuePost::default().over(&c).changes(&c).unwrap();
        assert!(paths.is_empty(), "{paths:?}");
        assert_eq!(p, c);
        let post = QueuePost {
            max_concurrent: Some("9".into()),
            rate_burst: Some("7".into()),
            ..QueuePost::default()
        };
        let (p, paths) = post.over(&c).changes(&c).unwrap();
        assert_eq!(paths, ["max_concurrent", "rate_limit"]);
        assert_eq!(p.max_concurrent, 9);
        assert_eq!(p.rate_limit.unwrap().per_second, 2.5);
        assert_eq!(p.rate_limit.unwrap().burst, 7);
        assert_eq!(p.payload_schema, c.payload_schema);
        assert_eq!(p.bucket, c.bucket);
        // A field carried blank means what the form says of blank.
        let post = QueuePost {
            max_concurrent: Some(String::new()),
            priority_aging: Some(String::new()),
            ..QueuePost::default()
        };
        let (p, paths) = post.over(&c).changes(&c).unwrap();
        assert_eq!(paths, ["max_concurrent", "priority_aging"]);
        assert_eq!((p.max_concurrent, p.priority_aging_ms), (0, None));
        let post = QueuePost {
            remove_payload_schema: Some("1".into()),
            ..QueuePost::default()
        };
        let (p, paths) = post.over(&c).changes(&c).unwrap();
        assert_eq!(paths, ["payload_schema"]);
        assert_eq!(p.payload_schema, None);
    }

    #[test]
    fn bad_text_is_one_line_naming_the_field() {
        let c = QueueConfig::default();
        let bad = |f: QueueForm| f.changes(&c).unwrap_err();
        let e = bad(QueueForm {
            max_concurrent: "-1".into(),
            ..QueueForm::default()
        });
        assert!(e.starts_with("max concurrent:"), "{e}");
        assert!(!e.contains('\n'));
        let e = bad(QueueForm {
            rate_per_second: "fast".into(),
            ..QueueForm::default()
        });
        assert!(e.starts_with("rate limit:"), "{e}");
        let e = bad(QueueForm {
            key_rate_burst: "3".into(),
            ..QueueForm::default()
        });
        assert!(e.starts_with("rate limit per key burst:"), "{e}");
        let e = bad(QueueForm {
            priority_aging: "soon".into(),
            ..QueueForm::default()
        });
        assert!(e.starts_with("priority aging:"), "{e}");
        let e = bad(QueueForm {
            fairness: "random".into(),
            ..QueueForm::default()
        });
        assert!(e.starts_with("fairness:"), "{e}");
    }
}
