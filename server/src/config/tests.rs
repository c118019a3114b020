//! Loading and validating configurations: layers, errors, secrets, queue tables.

use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::domain::token::TokenEntry;

fn args() -> ServeArgs {
    ServeArgs::default()
}

#[test]
fn defaults_validate_on_loopback() {
    let c = args().load().unwrap();
    assert_eq!(c.listen.port(), 50051);
    assert!(c.validate().is_ok());
}

#[test]
fn flags_override_the_file_which_overrides_defaults() {
    let dir = tempfile_dir();
    let path = dir.join("tb.toml");
    std::fs::write(
        &path,
        "reclaim_interval = \"2s\"\nretention = \"1h\"\n[retry]\nmax_attempts = 9\n\
         [queues.emails]\nmax_payload_bytes = 10\n",
    )
    .unwrap();
    let mut a = args();
    a.config = Some(path);
    a.retry_max_attempts = Some(4);
    let c = a.load().unwrap();
    assert_eq!(c.reclaim_interval, Duration::from_secs(2));
    assert_eq!(c.retry.max_attempts, 4);
    assert_eq!(c.queues["emails"].max_payload_bytes, Some(10));
    let v = c.validate().unwrap();
    assert_eq!(
        v.app.settings.queues["emails"].retention,
        Duration::from_secs(3600)
    );
}

#[test]
fn unknown_keys_and_bad_values_are_one_line_errors() {
    let dir = tempfile_dir();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "no_such_key = 1\n").unwrap();
    let mut a = args();
    a.config = Some(path);
    let e = a.load().unwrap_err();
    assert!(e.contains("no_such_key") && !e.contains('\n'), "{e}");
    let mut a = args();
    a.retry_jitter = Some(3.0);
    assert!(
        a.load()
            .unwrap()
            .validate()
            .err()
            .unwrap()
            .contains("jitter")
    );
}

#[test]
fn mysql_jobs_in_flight_is_bounded_and_reaches_the_settings() {
    assert_eq!(
        args()
            .load()
            .unwrap()
            .validate()
            .unwrap()
            .app
            .settings
            .mysql_jobs_in_flight,
        crate::service::DEFAULT_MYSQL_JOBS_IN_FLIGHT as usize
    );
    let mut a = args();
    a.mysql_jobs_in_flight = Some(4);
    let v = a.load().unwrap().validate().unwrap();
    assert_eq!(v.app.settings.mysql_jobs_in_flight, 4);
    for bad in [0, 17, u32::MAX] {
        let mut a = args();
        a.mysql_jobs_in_flight = Some(bad);
        let e = a.load().unwrap().validate().err().unwrap();
        assert!(
            e.contains("mysql_jobs_in_flight") && !e.contains('\n'),
            "{e}"
        );
    }
}

#[test]
fn a_public_address_needs_auth_or_insecure() {
    let mut a = args();
    a.listen = Some("0.0.0.0:50051".parse().unwrap());
    let e = a.load().unwrap().validate().err().unwrap();
    assert!(e.contains("--insecure"), "{e}");
    a.insecure = Some(true);
    assert!(a.load().unwrap().validate().is_ok());
}

#[test]
fn cors_origins_are_exact_origins() {
    let mut a = args();
    a.cors_allowed_origins = Some(vec!["https://console.example".into(), "*".into()]);
    let e = a.load().unwrap().validate().err().unwrap();
    assert!(
        e.contains("cors_allowed_origins") && e.contains("\"*\""),
        "{e}"
    );
    a.cors_allowed_origins = Some(vec!["https://console.example".into()]);
    let v = a.load().unwrap().validate().unwrap();
    assert_eq!(
        v.app.server.cors_allowed_origins,
        ["https://console.example"]
    );
}

#[test]
fn a_public_console_port_needs_auth_or_insecure() {
    let mut a = args();
    a.metrics_listen = Some("0.0.0.0:9090".into());
    let e = a.load().unwrap().validate().err().unwrap();
    assert!(e.contains("console") && e.contains("--insecure"), "{e}");
    a.insecure = Some(true);
    assert!(a.load().unwrap().validate().is_ok());
}

#[test]
fn printed_config_hides_secrets() {
    let mut c = Config {
        database_url: "postgres://tb:hunter2@db/tb".into(),
        ..Config::default()
    };
    c.auth.tokens.push(TokenEntry {
        role: crate::domain::token::Role::Admin,
        token: "super-secret-token-value".into(),
        name: None,
        workers: None,
        queues: None,
    });
    let s = c.redacted_toml();
    assert!(!s.contains("hunter2") && !s.contains("super-secret"), "{s}");
    assert!(s.contains("postgres://tb:***@db/tb"));
}

#[test]
fn queue_tables_seed_admission_gates() {
    let dir = tempfile_dir();
    let path = dir.join("tb.toml");
    std::fs::write(
        &path,
        "[queues.mail]\nmax_concurrent = 5\nrate_limit = { per_second = 2.5 }\n\
         fairness = \"round_robin_keys\"\npriority_aging = \"30s\"\n\
         [queues.bad]\nrate_limit = { per_second = -1.0 }\n",
    )
    .unwrap();
    let mut a = args();
    a.config = Some(path);
    let mut c = a.load().unwrap();
    let Err(bad) = c.validate() else {
        panic!("a negative rate is refused")
    };
    assert_eq!(
        bad,
        "queues.bad.rate_limit.per_second: must be above 0 and at most 1000000"
    );
    c.queues.remove("bad");
    let v = c.validate().unwrap();
    let g = &v.app.settings.gates["mail"];
    assert_eq!(g.max_concurrent, 5);
    assert_eq!(g.rate_limit.unwrap().per_second, 2.5);
    assert_eq!(
        g.fairness,
        crate::domain::admission::Fairness::RoundRobinKeys
    );
    assert_eq!(g.priority_aging_ms, Some(30_000));
    assert!(g.gated());
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tb-config-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
