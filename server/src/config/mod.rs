//! Configuration of `taskbroker serve`, in layers: built-in defaults, then a TOML
//! file (`--config`), then `TASKBROKER_*` environment variables, then flags.
//! Everything is validated before any port is bound; an invalid value stops the
//! broker with a one-line reason.
//!
//! - `file`: the effective configuration, as the TOML file's keys, and its
//!   defaults; printed back with secrets redacted.
//! - `flags`: the flags and `TASKBROKER_*` variables, layered over the file.
//! - `validation`: the checks, and the app's configuration built from it.

mod file;
mod flags;
mod validation;

pub use file::{AuthConfig, Config, LimitsConfig, QueueConfig, RetryConfig, TlsConfig, redact_url};
pub use flags::{DatabaseArgs, ServeArgs};
pub use validation::Validated;

#[cfg(test)]
mod tests;
