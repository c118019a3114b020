//! Pure broker logic: task states, validation and retry/backoff math.
//!
//! Nothing here does I/O or reads the clock: callers pass `now` in, so every rule
//! can be unit-tested without a runtime or a database.

pub mod event;
// Admission: queue settings and gates.
pub mod admission;
pub mod bounds;
pub mod bucket;
pub mod cron;
pub mod explain;
// The types of the Store trait, and lease order.
pub mod model;
// Payload schemas: JSON Schema documents that payloads must match.
pub mod payload_schema;
// Backpressure: the views of waiting tasks.
pub mod pending;
// What a leased task costs a Lease reply.
pub mod reply;
pub mod retry;
// Routing.
pub mod routing;
pub mod schedule;
pub mod task;
pub mod token;
pub mod validate;

pub use retry::RetryPolicy;
pub use task::{AttemptOutcome, FailureDecision, StoredState, TaskState};
