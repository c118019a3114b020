//! REPLACE_WAITING: what a Submit with `on_duplicate_key = REPLACE_WAITING`
//! writes over the task that holds its (queue, key) while that task waits.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

/// The new content of the task holding (`queue`, `key`).
#[derive(Debug, Clone, PartialEq)]
pub struct Replacement {
    pub queue: String,
    pub key: String,
    pub payload: Vec<u8>,
    pub run_at: DateTime<Utc>,
    pub priority: i32,
    pub metadata: BTreeMap<String, String>,
}

/// The entries the broker writes itself (producer, schedule, at-most-once)
/// start with this prefix; a replacement keeps the existing task's.
const BROKER_PREFIX: &str = "taskbroker.";

/// The metadata of a replaced task: the new submission's entries, except the
/// broker's own (`taskbroker.*`), which stay those of the existing task, so a
/// replacement never changes who owns it or how it may be retried.
pub(crate) fn merged_metadata(existing: &str, new: &BTreeMap<String, String>) -> String {
    let existing: BTreeMap<String, String> = serde_json::from_str(existing).unwrap_or_default();
    let mut out: BTreeMap<&String, &String> = new
        .iter()
        .filter(|(k, _)| !k.starts_with(BROKER_PREFIX))
        .collect();
    out.extend(
        existing
            .iter()
            .filter(|(k, _)| k.starts_with(BROKER_PREFIX)),
    );
    serde_json::to_string(&out).unwrap_or_else(|_| "{}".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_entries_stay_the_existing_tasks() {
        let existing = r#"{"a":"1","taskbroker.producer":"p1","taskbroker.at_most_once":"true"}"#;
        let new: BTreeMap<String, String> = [
            ("b".to_string(), "2".to_string()),
            ("taskbroker.producer".to_string(), "p2".to_string()),
        ]
        .into();
        let got: BTreeMap<String, String> =
            serde_json::from_str(&merged_metadata(existing, &new)).unwrap();
        let want: BTreeMap<String, String> = [
            ("b".to_string(), "2".to_string()),
            ("taskbroker.producer".to_string(), "p1".to_string()),
            ("taskbroker.at_most_once".to_string(), "true".to_string()),
        ]
        .into();
        assert_eq!(got, want);
    }
}
