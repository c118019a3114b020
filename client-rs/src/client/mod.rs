//! `Client`: one HTTP/2 channel to a broker, the producer calls (Submit) and the
//! worker-facing calls (Lease, Heartbeat, Checkpoint, Complete, Fail) with deadlines.
//! Admin calls are in `admin.rs`, waiting for results in `wait.rs`.
//!
//! - `mod.rs` (this file): `Client` and `ClientBuilder`.
//! - `connect.rs`: the connection settings (timeouts, token, TLS, environment), the
//!   channel, and each request's deadline and token.
//! - `submit.rs`: Submit, with the retries of a full queue.
//! - `worker_calls.rs`: Lease, Heartbeat, Checkpoint, Complete and Fail.

// In the order the docs list their methods.
mod connect;
mod submit;
mod worker_calls;

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig};

pub use submit::Submitted;

use crate::pb::admin_service_client::AdminServiceClient;
use crate::pb::broker_service_client::BrokerServiceClient;
use crate::pb::schedule_service_client::ScheduleServiceClient;

/// The address the CLI and the examples use when none is given.
pub const DEFAULT_ADDR: &str = "http://127.0.0.1:50051";

/// A connection to a broker. Cloning is cheap: clones share one channel, which
/// reconnects by itself after a broken connection.
#[derive(Debug, Clone)]
pub struct Client {
    broker: BrokerServiceClient<Channel>,
    admin: AdminServiceClient<Channel>,
    schedule: ScheduleServiceClient<Channel>,
    call_timeout: Duration,
    lease_margin: Duration,
    /// `Bearer TOKEN`, sent as `authorization` on every call.
    authorization: Option<MetadataValue<Ascii>>,
    /// Retry defaults declared with handlers (spec point 20), shared by the clones.
    pub(crate) retry_defaults: crate::policy::RetryDefaults,
}

/// How to connect; see [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    addr: String,
    connect_timeout: Duration,
    call_timeout: Duration,
    lease_margin: Duration,
    token: Option<String>,
    tls: Option<ClientTlsConfig>,
}
