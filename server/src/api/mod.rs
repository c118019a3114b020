//! gRPC handlers: decode requests, call the service, encode responses. `error`
//! is the one place service errors become `tonic::Status`.

mod admin;
pub mod auth;
mod broker;
mod convert;
mod error;
mod flow;
pub mod guard;
pub mod scaler;
mod schedule;
// Admission: live queue settings and Explain.
mod queues;

pub use admin::AdminApi;
pub use broker::BrokerApi;
pub use scaler::ScalerApi;
pub use schedule::ScheduleApi;

/// Metadata key recording which producer token submitted a task, when
/// authentication is on; producers may read only their own tasks.
pub use crate::service::PRODUCER_KEY;

/// The producer name of an authenticated producer call.
fn producer_of<T>(request: &tonic::Request<T>) -> Option<String> {
    request
        .extensions()
        .get::<auth::Principal>()
        .filter(|p| p.role == auth::Role::Producer)
        .map(|p| p.name.clone())
}
