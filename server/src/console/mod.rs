//! The web console, served on the HTTP side port beside `/metrics`: server-rendered
//! HTML (maud) with htmx for the live overview, every asset built into the binary.
//! It reads and changes tasks through the service layer only, never the store.
//!
//! - `auth`: sign-in with an admin token, the session and anti-CSRF cookies, the
//!   guard every request passes, and the security headers of every response.
//! - `layout`: the page frame and navigation, and how values are shown.
//! - one file per page: `overview`, `tasks` (the list), `task` (one task),
//!   `actions` (cancel, requeue, change, each confirmed first), `dead` (dead
//!   letters), `workers` (the registry, and one worker with its leases),
//!   `admission` (live queue settings; one queue with the form of its limits, read by
//!   `admission_form`, and its throughput charts drawn by `charts`) and `admission_actions` (pause, resume, each confirmed first;
//!   the edit), `explain` (the gates on a waiting task's page), `schedules`
//!   (the list and one schedule with its runs) and `schedule_actions` (pause,
//!   resume, trigger, delete, each confirmed first), `schedule_editor` (the
//!   create and edit form with its live preview of fire times, read by
//!   `schedule_form`); `assets` serves the embedded files.
//!
//! Why server-rendered HTML: `cargo build` needs no Node, the pages work without
//! JavaScript (htmx only refreshes the overview), and a strict Content Security
//! Policy (`'self'` only, no inline script) holds.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::html;

use crate::domain::token::TokenEntry;
use crate::service::{Broker, ServiceError};

mod actions;
mod admission;
mod admission_actions;
mod admission_form;
mod assets;
mod auth;
mod buckets;
mod charts;
mod dead;
mod explain;
mod layout;
mod overview;
mod payload_fields;
mod schedule_actions;
mod schedule_editor;
mod schedule_form;
mod schedules;
mod task;
mod tasks;
mod workers;

pub use layout::Viewer;

/// What every console handler shares.
pub struct Console {
    broker: Arc<Broker>,
    gate: auth::Gate,
    overview: overview::Cache,
}

/// The console's routes, for the HTTP side port. `tokens` are the broker's auth
/// tokens: empty means authentication is off (the port is then loopback-only
/// unless `insecure`, as config validation enforces).
pub fn router(broker: Arc<Broker>, tokens: &[TokenEntry]) -> Router {
    let console = Arc::new(Console {
        broker,
        gate: auth::Gate::new(tokens),
        overview: overview::Cache::default(),
    });
    console.overview.warm(console.broker.clone());
    Router::new()
        .route("/", get(overview::page))
        .route("/overview/live", get(overview::live))
        .route("/tasks", get(tasks::page))
        .route("/tasks/{id}", get(task::page))
        .route(
            "/tasks/{id}/cancel",
            get(actions::confirm_cancel).post(actions::cancel),
        )
        .route(
            "/tasks/{id}/requeue",
            get(actions::confirm_requeue).post(actions::requeue),
        )
        .route(
            "/tasks/{id}/change",
            get(actions::change_form).post(actions::change),
        )
        .route("/dead", get(dead::page))
        .route(
            "/dead/requeue",
            get(dead::confirm_requeue).post(dead::requeue),
        )
        .route("/dead/cancel", get(dead::confirm_cancel).post(dead::cancel))
        .route("/workers", get(workers::page))
        .route("/workers/{id}", get(workers::one))
        .route("/queues", get(admission::page))
        .route("/queues/{name}", get(admission::one))
        .route(
            "/queues/{name}/pause",
            get(admission_actions::confirm_pause).post(admission_actions::pause),
        )
        .route(
            "/queues/{name}/resume",
            get(admission_actions::confirm_resume).post(admission_actions::resume),
        )
        .route("/queues/{name}/edit", post(admission_actions::edit))
        .route("/cooldowns/lift", post(buckets::lift))
        .route("/schedules", get(schedules::list))
        .route(
            "/schedules/new",
            get(schedule_editor::new_form).post(schedule_editor::create),
        )
        .route("/schedules/preview", post(schedule_editor::preview))
        .route("/schedules/{id}", get(schedules::page))
        .route(
            "/schedules/{id}/edit",
            get(schedule_editor::edit_form).post(schedule_editor::edit),
        )
        .route(
            "/schedules/{id}/pause",
            get(schedule_actions::confirm_pause).post(schedule_actions::pause),
        )
        .route(
            "/schedules/{id}/resume",
            get(schedule_actions::confirm_resume).post(schedule_actions::resume),
        )
        .route(
            "/schedules/{id}/trigger",
            get(schedule_actions::confirm_trigger).post(schedule_actions::trigger),
        )
        .route(
            "/schedules/{id}/delete",
            get(schedule_actions::confirm_delete).post(schedule_actions::delete),
        )
        .route("/login", get(auth::login_form).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/assets/{name}", get(assets::serve))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(console.clone(), auth::guard))
        .with_state(console)
}

async fn not_found() -> Response {
    PageError::NotFound("No such page.".into()).into_response()
}

/// Why a page could not be shown; rendered as a small page with its status.
#[derive(Debug)]
pub enum PageError {
    BadInput(String),
    NotFound(String),
    Conflict(String),
    Forbidden(String),
    Unavailable,
    Internal,
}

impl From<ServiceError> for PageError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Invalid(i) | ServiceError::OutOfRange(i) => {
                PageError::BadInput(i.to_string())
            }
            ServiceError::NotFound { .. } => PageError::NotFound(e.to_string()),
            ServiceError::FailedPrecondition(m) => PageError::Conflict(m),
            ServiceError::PermissionDenied { .. } => PageError::Forbidden(e.to_string()),
            ServiceError::LeaseLost { .. }
            | ServiceError::AlreadyExists { .. }
            | ServiceError::QueueFull { .. } => PageError::Conflict(e.to_string()),
            ServiceError::Unavailable(_)
            | ServiceError::Draining
            | ServiceError::DeadlineExceeded => PageError::Unavailable,
            ServiceError::Internal(source) => {
                tracing::error!(error = %source, "console: internal error");
                PageError::Internal
            }
        }
    }
}

impl PageError {
    /// The one line a user reads.
    pub fn message(self) -> String {
        self.parts().1
    }

    fn parts(self) -> (StatusCode, String) {
        match self {
            PageError::BadInput(m) => (StatusCode::BAD_REQUEST, m),
            PageError::NotFound(m) => (StatusCode::NOT_FOUND, m),
            PageError::Conflict(m) => (StatusCode::CONFLICT, m),
            PageError::Forbidden(m) => (StatusCode::FORBIDDEN, m),
            PageError::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "The database is unavailable; try again shortly.".into(),
            ),
            PageError::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal error; the broker's log has the detail.".into(),
            ),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, message) = self.parts();
        let title = status.canonical_reason().unwrap_or("Error");
        let body = html! {
            h1 { (title) }
            p.error role="alert" { (message) }
            p { a href="/" { "Back to the overview" } }
        };
        (status, layout::page(title, "", None, body)).into_response()
    }
}

/// Treats an empty form or query field as absent.
fn non_empty(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}
