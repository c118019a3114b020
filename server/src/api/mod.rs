//! gRPC handlers: decode requests, call the service, encode responses. `error`
//! is the one place service errors become `tonic::Status`.

mod admin;
pub mod auth;
mod broker;
/// HTTP/JSON (the Connect protocol) on the gRPC port.
pub mod connect;
mod convert;
mod error;
mod flow;
pub mod guard;
pub mod scaler;
mod schedule;
// Admission: live queue settings and Explain.
mod admission;
// Limit buckets and cooldowns.
mod buckets;

pub use admin::AdminApi;
pub use broker::BrokerApi;
pub use scaler::ScalerApi;
pub use schedule::ScheduleApi;

/// Metadata key recording which producer token submitted a task, when
/// authentication is on; producers may read only their own tasks.
pub use crate::service::PRODUCER_KEY;

/// The encoded descriptors of the services served here, for gRPC reflection and
/// for the guard's table of method paths.
pub(crate) const DESCRIPTOR: &[u8] = tonic::include_file_descriptor_set!("taskbroker_descriptor");
pub(crate) const KEDA_DESCRIPTOR: &[u8] =
    tonic::include_file_descriptor_set!("externalscaler_descriptor");
/// `google/rpc/error_details.proto`, for reflection: the details of error statuses.
pub(crate) const RPC_DESCRIPTOR: &[u8] = tonic::include_file_descriptor_set!("rpc_descriptor");

/// The producer name of an authenticated producer call.
fn producer_of<T>(request: &tonic::Request<T>) -> Option<String> {
    request
        .extensions()
        .get::<auth::Principal>()
        .filter(|p| p.role == auth::Role::Producer)
        .map(|p| p.name.clone())
}

/// A producer sees only the tasks it submitted; others look absent.
fn own(t: &crate::store::TaskRecord, producer: Option<&str>) -> Result<(), tonic::Status> {
    match producer {
        Some(name) if t.metadata.get(PRODUCER_KEY).map(String::as_str) != Some(name) => Err(
            error::status(crate::service::ServiceError::not_found(&t.id)),
        ),
        _ => Ok(()),
    }
}
