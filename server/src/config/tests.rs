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

#[test]
fn queue_tables_set_a_bucket_and_a_payload_schema() {
    let dir = tempfile_dir();
    let schema_file = dir.join("invoice.schema.json");
    std::fs::write(&schema_file, "{\"type\": \"object\"}\n").unwrap();
    let path = dir.join("tb.toml");
    std::fs::write(
        &path,
        format!(
            "[queues.orders]\nbucket = \"partner-api\"\n\
             payload_schema = '{{\"type\": \"object\", \"required\": [\"amount\"]}}'\n\
             [queues.invoices]\npayload_schema_file = {:?}\n\
             [queues.plain]\nbucket = \"\"\npayload_schema = \"\"\n",
            schema_file.display().to_string()
        ),
    )
    .unwrap();
    let mut a = args();
    a.config = Some(path);
    let v = a.load().unwrap().validate().unwrap();
    let gates = &v.app.settings.gates;
    // A bucket not defined yet is taken, as UpdateQueue takes it.
    assert_eq!(gates["orders"].bucket.as_deref(), Some("partner-api"));
    assert!(gates["orders"].gated(), "a bucket takes the gated lease");
    assert_eq!(
        gates["orders"].payload_schema.as_deref(),
        Some("{\"type\": \"object\", \"required\": [\"amount\"]}")
    );
    assert_eq!(
        gates["invoices"].payload_schema.as_deref(),
        Some("{\"type\": \"object\"}"),
        "the file's text without its final line end"
    );
    assert_eq!(gates["plain"].bucket, None, "blank: none");
    assert_eq!(gates["plain"].payload_schema, None, "blank: none");
    let seeded: std::collections::HashMap<_, _> = v.app.settings.seed().into_iter().collect();
    assert_eq!(seeded["orders"].bucket.as_deref(), Some("partner-api"));
    assert!(seeded["invoices"].payload_schema.is_some());
}

/// The error of a configuration with one `[queues.orders]` table.
fn queue_error(q: QueueConfig) -> String {
    let mut c = Config::default();
    c.queues.insert("orders".into(), q);
    let e = c.validate().err().expect("refused");
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

fn inline(schema: &str) -> QueueConfig {
    QueueConfig {
        payload_schema: Some(schema.into()),
        ..QueueConfig::default()
    }
}

/// A schema document of exactly `len` bytes.
fn schema_of_len(len: usize) -> String {
    format!("{{\"description\":\"{}\"}}", "x".repeat(len - 18))
}

#[test]
fn queue_schemas_are_checked_as_update_queue_checks_them() {
    const MAX: usize = crate::domain::payload_schema::MAX_PAYLOAD_SCHEMA_BYTES;
    assert_eq!(schema_of_len(MAX).len(), MAX);
    let mut c = Config::default();
    c.queues
        .insert("orders".into(), inline(&schema_of_len(MAX)));
    assert!(c.validate().is_ok(), "exactly the limit is taken");
    assert_eq!(
        queue_error(inline(&schema_of_len(MAX + 1))),
        "queues.orders.payload_schema: is 65537 bytes, more than the limit of 65536"
    );
    let e = queue_error(inline("{\"type\": "));
    assert!(
        e.starts_with("queues.orders.payload_schema: is not JSON"),
        "{e}"
    );
    let e = queue_error(inline("[1]"));
    assert!(
        e.starts_with("queues.orders.payload_schema: is not a JSON Schema"),
        "{e}"
    );
    let e = queue_error(inline("{\"type\": 3}"));
    assert!(
        e.starts_with("queues.orders.payload_schema: is not a valid JSON Schema"),
        "{e}"
    );
    let e = queue_error(inline("{\"$ref\": \"https://example.com/s.json\"}"));
    assert!(
        e.starts_with("queues.orders.payload_schema: ") && e.contains("remote $ref"),
        "{e}"
    );
}

#[test]
fn queue_schema_files_are_read_bounded_and_checked() {
    const MAX: usize = crate::domain::payload_schema::MAX_PAYLOAD_SCHEMA_BYTES;
    let dir = tempfile_dir();
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        QueueConfig {
            payload_schema_file: Some(p),
            ..QueueConfig::default()
        }
    };
    let big = dir.join("big.json");
    assert_eq!(
        queue_error(file("big.json", schema_of_len(MAX + 1).as_bytes())),
        format!(
            "queues.orders.payload_schema_file {}: is 65537 bytes, more than the limit of 65536",
            big.display()
        )
    );
    let e = queue_error(file("bad.json", b"{ not json"));
    assert!(e.contains("bad.json: is not JSON"), "{e}");
    let e = queue_error(file("latin1.json", b"{\"title\": \"\xe9\"}"));
    assert!(e.ends_with("latin1.json: is not UTF-8"), "{e}");
    let missing = dir.join("missing.json");
    let e = queue_error(QueueConfig {
        payload_schema_file: Some(missing.clone()),
        ..QueueConfig::default()
    });
    assert!(
        e.starts_with(&format!(
            "cannot read queues.orders.payload_schema_file {}: ",
            missing.display()
        )),
        "{e}"
    );
    let e = queue_error(QueueConfig {
        payload_schema: Some("true".into()),
        ..file("both.json", b"true")
    });
    assert_eq!(
        e,
        "queues.orders: set payload_schema or payload_schema_file, not both"
    );
}

#[test]
fn queue_buckets_are_checked_as_update_queue_checks_them() {
    let bucket = |b: &str| QueueConfig {
        bucket: Some(b.into()),
        ..QueueConfig::default()
    };
    assert_eq!(
        queue_error(bucket("partner api")),
        "queues.orders.bucket: may only contain A-Z a-z 0-9 . _ : -"
    );
    assert_eq!(
        queue_error(bucket(&"b".repeat(129))),
        "queues.orders.bucket: is longer than 128 characters"
    );
    let mut c = Config::default();
    c.queues.insert("orders".into(), bucket(&"b".repeat(128)));
    assert!(c.validate().is_ok(), "128 characters are taken");
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
