//! gRPC handlers: decode requests, call the service, encode responses. `error`
//! is the one place service errors become `tonic::Status`.

mod admin;
mod broker;
mod convert;
mod error;

pub use admin::AdminApi;
pub use broker::BrokerApi;
