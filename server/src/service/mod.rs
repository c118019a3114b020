//! Broker semantics, one file per operation. The service validates requests,
//! applies the rules in `domain`, calls the `Store`, and wakes long-polls. It knows
//! nothing of gRPC: `api` turns its errors into statuses.

use std::sync::Arc;

use crate::dispatch::Dispatcher;
use crate::domain::RetryPolicy;
use crate::domain::validate::Limits;
use crate::store::Store;

mod admin;
mod clock;
mod error;
mod heartbeat;
mod lease;
mod settle;
mod submit;

pub use admin::{ListTasks, TaskPage, UpdateTask};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::ServiceError;
pub use heartbeat::CheckpointRequest;
pub use lease::LeaseRequest;
pub use settle::FailRequest;
pub use submit::{RetrySpec, SubmitTask};

/// Broker-wide settings.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub limits: Limits,
    /// Applied to the fields a task's retry policy leaves unset.
    pub default_retry: RetryPolicy,
}

/// The broker: shared by every RPC handler and the maintenance loop.
pub struct Broker {
    store: Arc<dyn Store>,
    dispatch: Arc<Dispatcher>,
    clock: Arc<dyn Clock>,
    settings: Settings,
}

impl Broker {
    pub fn new(
        store: Arc<dyn Store>,
        dispatch: Arc<Dispatcher>,
        clock: Arc<dyn Clock>,
        settings: Settings,
    ) -> Self {
        Broker {
            store,
            dispatch,
            clock,
            settings,
        }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatch
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }
}
