//! The `spec_defaults` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::worker::{self, defaults};
use taskbroker_client::{Client, Error, TaskContext, TaskError, Worker};

use crate::{Outcome, check};

pub(crate) async fn spec_defaults(c: Client, q: String) -> Outcome {
    let w = Worker::builder(c)
        .queue(q, |_ctx: TaskContext| async { Ok::<_, TaskError>(()) })
        .build();
    let got = w.settings();
    let want = (
        4,
        Duration::from_secs(30),
        Duration::from_secs(10),
        Duration::from_secs(10),
        Duration::from_secs(30),
    );
    check(got == want, format!("defaults {got:?}, want {want:?}"))?;
    check(defaults::CONCURRENCY == 4, "defaults::CONCURRENCY is not 4")?;
    check(
        worker::backoff_ceiling(0) == Duration::from_millis(200)
            && worker::backoff_ceiling(10) == Duration::from_secs(10),
        "backoff ceilings are not 200 ms and 10 s",
    )?;
    let draws: Vec<Duration> = (0..50).map(|_| worker::backoff_delay(3)).collect();
    check(
        draws
            .iter()
            .all(|d| *d >= Duration::from_millis(160) && *d <= Duration::from_millis(1600)),
        format!("backoff_delay(3) outside [160 ms, 1.6 s]: {draws:?}"),
    )?;
    check(
        draws.iter().any(|d| *d != draws[0]),
        "backoff_delay(3) has no jitter",
    )?;
    for code in [
        tonic::Code::Unauthenticated,
        tonic::Code::PermissionDenied,
        tonic::Code::InvalidArgument,
        tonic::Code::Unimplemented,
    ] {
        let e = Error::from(tonic::Status::new(code, "x"));
        check(
            worker::stops_worker(&e),
            format!("stops_worker({code:?}) false"),
        )?;
    }
    let e = Error::from(tonic::Status::unavailable("x"));
    check(!worker::stops_worker(&e), "stops_worker(UNAVAILABLE) true")
}
