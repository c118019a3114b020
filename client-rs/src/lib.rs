//! The Rust client for taskbroker: producer and admin calls, waiting for results,
//! and a worker runtime.
//!
//! - `pb`: the code generated from `proto/taskbroker/v1` (messages and the raw
//!   `BrokerServiceClient` / `AdminServiceClient` stubs).
//! - `client/`: [`Client`] (one cheap-to-clone channel with timeouts), Submit and
//!   the worker-facing calls (Lease with a long-poll deadline, Heartbeat, ...).
//! - `spec.rs`: [`TaskSpec`], the builder of a task to submit.
//! - `admin.rs`: get, list (a stream over pages), cancel, update, requeue, attempts, stats.
//! - `schedule.rs`: [`Client::schedules`] ([`Schedules`]) and [`NewSchedule`], cron,
//!   interval and one-off schedules the broker fires.
//! - `wait.rs`: [`Client::wait`] and [`Client::submit_and_wait`], results as a function call.
//! - `error.rs`: [`Error`], which keeps the gRPC code and the `LEASE_LOST` reason.
//! - `worker/`: [`Worker`], the runtime that leases, heartbeats, runs handlers and reports.
//! - `trace.rs`: W3C trace context on every call; `send`/`process` spans.
//! - `workers.rs`: the worker registry ([`Client::list_workers`]) and [`Sticky`].
//! - `cli/` (feature `cli`): the client subcommands of the `taskbroker` binary.
//! - `outbox/` (feature `outbox`): [`outbox::enqueue`] in the producer's Postgres
//!   transaction (`outbox::mysql` in MySQL/MariaDB), and [`outbox::Relay`], which
//!   ships those rows to the broker.
//! - `testing`: [`testing::TestContext`] and [`testing::FakeBroker`], handlers and
//!   producers tested with no broker.
//! - `policy.rs`: [`QueuePolicy`], retries, non-retryable errors and slots declared
//!   with a handler.
//! - `task_def.rs`: [`TaskDef`], a queue with its payload and result types.
//! - `queue.rs`: live queue settings ([`QueueUpdate`]) and `explain_task` (admission).
//!
//! ```no_run
//! use std::time::Duration;
//! use taskbroker_client::{Client, TaskContext, TaskError, TaskSpec, Worker};
//!
//! # async fn demo() -> Result<(), taskbroker_client::Error> {
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! client.submit(TaskSpec::new("emails", b"hi".to_vec()).key("order-42")).await?;
//!
//! async fn send(ctx: TaskContext) -> Result<String, TaskError> {
//!     Ok(format!("sent {} bytes", ctx.payload().len()))
//! }
//! Worker::builder(client)
//!     .queue("emails", send)
//!     .concurrency(16)
//!     .build()
//!     .run_until_signal() // drains on SIGTERM or Ctrl-C
//!     .await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

/// Generated messages and client stubs of the `taskbroker.v1` package.
pub mod pb {
    tonic::include_proto!("taskbroker.v1");
}

mod admin;
// Limit buckets and cooldowns.
mod buckets;
mod client;
mod error;
// Flow: events, watch, bulk operations.
mod flow;
mod schedule;
mod spec;
pub mod testing;
pub mod time;
pub mod trace;
mod wait;
pub mod worker;
// Routing: the worker registry and sticky retries.
mod workers;
// Admission.
mod queue;
// Policy with the handler, and typed task definitions.
mod policy;
mod task_def;

#[cfg(feature = "cli")]
pub mod cli;

#[cfg(feature = "outbox")]
pub mod outbox;

pub use admin::{TaskFilter, TaskUpdate};
pub use buckets::{BucketUpdate, CooldownOf};
pub use client::{Client, ClientBuilder, DEFAULT_ADDR, Submitted};
pub use error::{ERROR_DOMAIN, Error, LEASE_LOST, code_name, state_name};
pub use pb::TaskState;
pub use policy::QueuePolicy;
pub use queue::QueueUpdate;
pub use schedule::{NewSchedule, Schedules};
pub use spec::TaskSpec;
pub use task_def::TaskDef;
pub use worker::{CancelReason, Json, TaskContext, TaskError, Worker, WorkerEvent};
pub use workers::{Sticky, WorkerFilter};

/// TLS settings for [`ClientBuilder::tls_config`]: the broker's CA and, for mTLS, the
/// client's certificate and key (tonic's types, re-exported).
pub mod tls {
    pub use tonic::transport::{Certificate, ClientTlsConfig, Identity};
}
