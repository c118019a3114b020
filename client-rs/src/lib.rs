//! The Rust client for taskbroker.
//!
//! `pb` holds the code generated from `proto/taskbroker/v1` (messages and the
//! `BrokerServiceClient` / `AdminServiceClient` stubs).
#![forbid(unsafe_code)]

/// Generated messages and client stubs of the `taskbroker.v1` package.
pub mod pb {
    tonic::include_proto!("taskbroker.v1");
}
