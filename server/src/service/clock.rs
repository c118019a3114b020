//! The broker's notion of now. Tests use [`ManualClock`] to move time forward
//! instead of sleeping.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// Wall-clock time.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that starts at the real time and moves only when told.
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl Default for ManualClock {
    fn default() -> Self {
        // Whole milliseconds, the precision the stores keep, so tests compare exactly.
        let now = Utc::now();
        ManualClock(Mutex::new(
            DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now),
        ))
    }
}

impl ManualClock {
    /// The current manual time.
    pub fn now_utc(&self) -> DateTime<Utc> {
        self.now()
    }

    pub fn advance(&self, by: std::time::Duration) {
        let mut now = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *now += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::zero());
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
