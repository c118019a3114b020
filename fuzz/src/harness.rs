//! What the fuzz targets do with one input, written so that the regression test
//! in the server's suite (`server/tests/fuzz_regressions.rs`) runs the very same
//! code over every saved input in `fuzz/regressions/`.
//!
//! - [`rpc_request`]: the first byte picks one of the 14 RPCs, the rest is decoded
//!   as its request message with prost (as tonic would), and the real handler runs
//!   it: conversion, validation, service and a SQLite store. A refusal must be a
//!   clear status (never INTERNAL or UNKNOWN) with a one-line message.
//! - [`config_file`]: the bytes before the first NUL are a TOML config file, the
//!   rest an auth tokens file; loading, validating and printing the config must
//!   not panic, and every error is one line.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prost::Message;
use taskbroker_server::api::{AdminApi, BrokerApi};
use taskbroker_server::dispatch::Dispatcher;
use taskbroker_server::metrics::Metrics;
use taskbroker_server::pb;
use taskbroker_server::pb::admin_service_server::AdminService;
use taskbroker_server::pb::broker_service_server::BrokerService;
use taskbroker_server::service::{Broker, ManualClock, Settings};
use tonic::{Code, Request, Status};

struct Harness {
    rt: tokio::runtime::Runtime,
    broker: BrokerApi,
    admin: AdminApi,
    _dir: tempfile::TempDir,
}

fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // In memory when /dev/shm exists: every accepted write syncs the file.
        let dir = tempfile::Builder::new()
            .prefix("taskbroker-fuzz")
            .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
                "/dev/shm".into()
            } else {
                std::env::temp_dir()
            })
            .expect("tempdir");
        let url = format!("sqlite://{}/fuzz.db", dir.path().display());
        let store = rt.block_on(async {
            let s = taskbroker_server::store::connect(&url, 2)
                .await
                .expect("open the store");
            s.migrate().await.expect("migrate");
            s
        });
        let mut settings = Settings::default();
        // Long-polls end quickly: a Lease that asks to wait is still validated and run.
        settings.limits.max_wait = Duration::from_millis(20);
        let broker = Arc::new(Broker::new(
            store,
            Arc::new(Dispatcher::new()),
            Arc::new(ManualClock::default()),
            settings,
            Arc::new(Metrics::new()),
        ));
        Harness {
            rt,
            broker: BrokerApi::new(broker.clone()),
            admin: AdminApi::new(broker),
            _dir: dir,
        }
    })
}

/// A refusal is one of the statuses a client can act on, in one line.
fn check<T>(rpc: &str, r: Result<T, Status>) {
    if let Err(s) = r {
        assert!(
            !matches!(s.code(), Code::Internal | Code::Unknown | Code::DataLoss),
            "{rpc}: answered {:?}: {}",
            s.code(),
            s.message()
        );
        assert!(
            !s.message().contains('\n'),
            "{rpc}: a message of several lines: {:?}",
            s.message()
        );
    }
}

macro_rules! call {
    ($h:expr, $svc:ident, $method:ident, $msg:ty, $bytes:expr) => {{
        // What tonic does with bytes it cannot decode is its own business.
        if let Ok(m) = <$msg>::decode($bytes) {
            let r = $h.rt.block_on($h.$svc.$method(Request::new(m)));
            check(stringify!($method), r);
        }
    }};
}

/// One RPC with a request decoded from `data[1..]`, chosen by `data[0]`.
pub fn rpc_request(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    let h = harness();
    match which % 14 {
        0 => call!(h, broker, submit, pb::SubmitRequest, bytes),
        1 => call!(h, broker, lease, pb::LeaseRequest, bytes),
        2 => call!(h, broker, heartbeat, pb::HeartbeatRequest, bytes),
        3 => call!(h, broker, checkpoint, pb::CheckpointRequest, bytes),
        4 => call!(h, broker, complete, pb::CompleteRequest, bytes),
        5 => call!(h, broker, fail, pb::FailRequest, bytes),
        6 => call!(h, broker, complete_many, pb::CompleteManyRequest, bytes),
        7 => call!(h, admin, get_task, pb::GetTaskRequest, bytes),
        8 => call!(h, admin, list_tasks, pb::ListTasksRequest, bytes),
        9 => call!(h, admin, cancel_task, pb::CancelTaskRequest, bytes),
        10 => call!(h, admin, update_task, pb::UpdateTaskRequest, bytes),
        11 => call!(h, admin, requeue_task, pb::RequeueTaskRequest, bytes),
        12 => call!(h, admin, list_attempts, pb::ListAttemptsRequest, bytes),
        _ => call!(h, admin, get_queue_stats, pb::GetQueueStatsRequest, bytes),
    }
}

/// A config file (before the first NUL) and a tokens file (after it).
pub fn config_file(data: &[u8]) {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"));
    let (toml, tokens) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(text) = std::str::from_utf8(tokens)
        && let Err(e) = taskbroker_server::api::auth::parse_token_file(text)
    {
        assert!(
            !e.contains('\n'),
            "token file error of several lines: {e:?}"
        );
    }
    let path = dir.path().join("config.toml");
    std::fs::write(&path, toml).expect("write the config file");
    let args = taskbroker_server::config::ServeArgs {
        config: Some(path),
        ..Default::default()
    };
    let config = match args.load() {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.contains('\n'), "load error of several lines: {e:?}");
            return;
        }
    };
    match config.validate() {
        Ok(_) => {
            let printed = config.redacted_toml();
            assert!(!printed.is_empty(), "a valid config prints");
        }
        Err(e) => assert!(
            !e.contains('\n'),
            "validation error of several lines: {e:?}"
        ),
    }
}
