//! Conversions between `std::time` and the protobuf well-known types the contract uses.

use std::time::{Duration, SystemTime};

/// A protobuf `Duration`; durations past its range (about 292 billion years) saturate.
pub fn to_proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

/// A protobuf `Timestamp`.
pub fn to_proto_timestamp(t: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

/// The time a protobuf `Timestamp` names; `None` when it is unset or out of range.
pub fn from_proto_timestamp(t: Option<&prost_types::Timestamp>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(*t).ok())
}

/// The length a protobuf `Duration` names; `None` when unset or negative.
pub fn from_proto_duration(d: Option<&prost_types::Duration>) -> Option<Duration> {
    d.and_then(|d| Duration::try_from(*d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let d = Duration::from_millis(1500);
        assert_eq!(from_proto_duration(Some(&to_proto_duration(d))), Some(d));
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(from_proto_timestamp(Some(&to_proto_timestamp(t))), Some(t));
        assert_eq!(from_proto_timestamp(None), None);
        assert_eq!(to_proto_duration(Duration::MAX).seconds, i64::MAX);
    }
}
