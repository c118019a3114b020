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

/// Reads the fuzzer's bytes as a stream of small numbers (zeros once spent).
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
}

/// One Submit of up to 6 specs combining fan-out copies (0 to 1,100),
/// dependencies by index (repeated up to 2,040 times), unknown dependency ids,
/// target labels and metadata of every size around their limits, and payloads
/// up to 2 MiB, through the real handler. Besides a clear status, the answer
/// must agree with the limits counted after expansion
/// (`domain::bounds::check`): refused when they are passed, never more than
/// 1,000 tasks when accepted.
pub fn submit_expansion(data: &[u8]) {
    use taskbroker_server::domain::bounds;
    let mut b = Bytes(data);
    let n = 1 + usize::from(b.u8() % 6);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let copies = u32::from(b.u16() % 1101);
        let mut t = pb::TaskSpec {
            queue: "fuzz".into(),
            fanout: (copies > 0).then_some(pb::Fanout {
                copies,
                distinct_workers: b.u8() & 1 == 1,
            }),
            payload: vec![0; usize::from(b.u16()) * 32],
            ..Default::default()
        };
        for _ in 0..b.u8() % 4 {
            let (k, times) = (u32::from(b.u8()) % (i as u32 + 2), usize::from(b.u8()) * 8);
            t.depends_on_index
                .extend(std::iter::repeat_n(k, times.max(1)));
        }
        for _ in 0..b.u8() % 3 {
            t.depends_on.push(format!("unknown-{}", b.u8()));
        }
        let labels = b.u8() % 40;
        let mut target = pb::Target::default();
        for l in 0..labels {
            let key = format!("{l:0>width$}", width = usize::from(b.u8() % 70));
            target
                .labels
                .insert(key, "v".repeat(usize::from(b.u8() % 140)));
        }
        if labels > 0 {
            t.target = Some(target);
        }
        for m in 0..b.u8() % 70 {
            t.metadata
                .insert(format!("m{m}"), "x".repeat(usize::from(b.u16()) % 600));
        }
        tasks.push(t);
    }
    // What the limits say of this request (indexes that are not earlier, bad
    // label or fan-out fields are refused elsewhere: then only "refused" is
    // checked).
    let shapes: Vec<bounds::SpecShape> = tasks
        .iter()
        .map(|t| {
            let mut idx: Vec<usize> = t.depends_on_index.iter().map(|&k| k as usize).collect();
            bounds::dedup(&mut idx);
            let mut ids = t.depends_on.clone();
            bounds::dedup(&mut ids);
            let pairs = |m: &std::collections::HashMap<String, String>| -> usize {
                m.iter().map(|(k, v)| k.len() + v.len()).sum()
            };
            bounds::SpecShape {
                copies: t.fanout.map_or(1, |f| f.copies.clamp(1, 1000)),
                depends_on: ids.len(),
                depends_on_index: idx,
                bytes: (t.queue.len()
                    + t.payload.len()
                    + pairs(&t.metadata)
                    + t.target.as_ref().map_or(0, |g| pairs(&g.labels))
                    + ids.iter().map(String::len).sum::<usize>()) as u64,
            }
        })
        .collect();
    let limits = bounds::check(&shapes);
    let h = harness();
    let r =
        h.rt.block_on(h.broker.submit(Request::new(pb::SubmitRequest { tasks })));
    if let Ok(answer) = &r {
        let made: usize = answer
            .get_ref()
            .results
            .iter()
            .map(|t| t.copy_task_ids.len().max(1))
            .sum();
        assert!(made <= 1000, "accepted {made} tasks");
        assert!(
            limits.is_ok(),
            "accepted a request over the limits: {limits:?}"
        );
    }
    check("submit", r);
}
