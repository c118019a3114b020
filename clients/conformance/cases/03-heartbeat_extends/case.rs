//! The `heartbeat_extends` case of the client conformance scenario, for the Rust client
//! (README.md beside this file says what it does and expects).

use std::time::Duration;

use taskbroker_client::time::from_proto_timestamp;
use taskbroker_client::{Client, TaskSpec};

use crate::{Outcome, at, check, heartbeat_req, lease_one, submit};

pub(crate) async fn heartbeat_extends(c: Client, q: String) -> Outcome {
    submit(&c, TaskSpec::new(q.clone(), Vec::new())).await?;
    let t = lease_one(&c, &q, Duration::from_secs(5), Duration::ZERO).await?;
    let hb = at(
        "Heartbeat",
        c.heartbeat(heartbeat_req(
            &t.task_id,
            &t.lease_token,
            Some(Duration::from_secs(60)),
        ))
        .await,
    )?;
    check(
        hb.len() == 1,
        format!("{} lease statuses, want 1", hb.len()),
    )?;
    check(!hb[0].lost, "the live lease is reported lost")?;
    let leased_until =
        from_proto_timestamp(t.lease_expires_at.as_ref()).ok_or("lease has no expiry")?;
    let extended =
        from_proto_timestamp(hb[0].lease_expires_at.as_ref()).ok_or("heartbeat has no expiry")?;
    check(
        extended >= leased_until + Duration::from_secs(30),
        format!(
            "expiry moved by {:?}, want at least 30s",
            extended.duration_since(leased_until).unwrap_or_default()
        ),
    )?;
    let stale = at(
        "Heartbeat (stale)",
        c.heartbeat(heartbeat_req(&t.task_id, "stale", None)).await,
    )?;
    check(
        stale.len() == 1 && stale[0].lost,
        "a stale token is not reported lost",
    )
}
