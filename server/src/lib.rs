//! taskbroker: a gRPC task broker with a durable task table.
//!
//! The parts, from the wire inwards (dependencies point one way):
//! - [`api`]: tonic handlers for `BrokerService`, `AdminService` and `ScheduleService`;
//!   the one place errors become `tonic::Status` (`api/error.rs`); KEDA's external
//!   scaler (`api/scaler.rs`, protocol in [`keda`]).
//! - [`service`]: broker semantics, one file per operation (submit, lease,
//!   heartbeat/checkpoint, settle, admin); validation and wake-ups.
//! - [`dispatch`]: long-poll waiters and their wake-ups.
//! - [`domain`]: pure rules with no I/O: states, validation, retry/backoff math.
//! - [`store`]: the `Store` trait and its SQLite, Postgres and MySQL/MariaDB
//!   implementations.
//! - [`maintenance`]: the reaper (expired leases, passed deadlines), retention, and
//!   the scheduler (fires due schedules; calendar rules in `domain::schedule`).
//! - [`metrics`] and [`http`]: Prometheus metrics and the HTTP probes (`/healthz`,
//!   `/readyz`) on their own port; [`depth`]: the queue depths a scrape shows,
//!   counted off the scrape.
//! - [`console`]: the web console on that port (server-rendered HTML).
//! - [`telemetry`]: logs and OpenTelemetry traces (context crosses the queue).
//! - [`app`] and [`config`]: start-up, configuration and shutdown.
//! - [`smoke`]: the `taskbroker smoke` end-to-end check (`helm test`).
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod config;
pub mod console;
pub mod depth;
pub mod dispatch;
pub mod domain;
pub mod http;
pub mod maintenance;
pub mod metrics;
pub mod service;
pub mod smoke;
pub mod store;
pub mod telemetry;

/// KEDA's external scaler protocol, generated from `server/proto/keda` (server and
/// client); served by [`api::ScalerApi`].
pub mod keda {
    tonic::include_proto!("externalscaler");
}

/// Code generated from `proto/taskbroker/v1` (server side).
pub mod pb {
    tonic::include_proto!("taskbroker.v1");
}
