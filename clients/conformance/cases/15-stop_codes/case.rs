//! The `stop_codes` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::{Client, Error, Worker};

use crate::spec::worker;
use crate::{Outcome, at, check};

async fn run_until_stopped(w: Worker) -> Result<Result<(), Error>, String> {
    tokio::time::timeout(Duration::from_secs(20), w.run(std::future::pending()))
        .await
        .map_err(|_| "the worker kept running".to_string())
}

pub(crate) async fn stop_codes(c: Client, q: String) -> Outcome {
    let r = run_until_stopped(worker(&c, "has space").build()).await?;
    check(
        r.as_ref().err().and_then(Error::code) == Some(tonic::Code::InvalidArgument),
        format!("bad queue: run ended {r:?}, want INVALID_ARGUMENT"),
    )?;
    if std::env::var("TASKBROKER_TOKEN").is_err() {
        return Ok(());
    }
    let addr = std::env::var("TASKBROKER_ADDR").unwrap_or_default();
    let bad = at(
        "connect",
        match Client::builder(addr).env_settings() {
            Ok(b) => b.bearer_token("wrong-token-0123456789").connect().await,
            Err(e) => Err(e),
        },
    )?;
    let r = run_until_stopped(worker(&bad, &q).build()).await?;
    check(
        r.as_ref().err().and_then(Error::code) == Some(tonic::Code::Unauthenticated),
        format!("wrong token: run ended {r:?}, want UNAUTHENTICATED"),
    )
}
