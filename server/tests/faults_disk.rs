//! Fault test: the SQLite broker's disk fills up. Submits are refused with a clear
//! RESOURCE_EXHAUSTED or UNAVAILABLE (never INTERNAL, never a crash), the database
//! is not corrupted (`PRAGMA integrity_check`), and service resumes by itself when
//! space returns, with every acknowledged task still there.
//!
//! The full disk is a small tmpfs the test mounts (it must run as root); otherwise
//! a file-size limit on the broker process (`ulimit -f`, lifted with `prlimit`).
//! Without either the test is skipped, saying why.

mod common;
mod fault_harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use fault_harness::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::Code;

/// How the disk is made full, and made roomy again.
enum Limit {
    Tmpfs(PathBuf),
    /// A soft `ulimit -f` (6 MB in sh's 512-byte blocks; a soft limit can be raised
    /// again without privileges).
    FileSize,
}

impl Limit {
    /// `TASKBROKER_FULL_DISK=ulimit` skips the tmpfs (to test the other way).
    fn choose(dir: &Path) -> Option<Limit> {
        let tmpfs = std::env::var("TASKBROKER_FULL_DISK").as_deref() != Ok("ulimit");
        let mounted = tmpfs
            && Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=6m", "tmpfs"])
                .arg(dir)
                .output()
                .is_ok_and(|o| o.status.success());
        if mounted {
            return Some(Limit::Tmpfs(dir.to_path_buf()));
        }
        let prlimit = Command::new("prlimit").arg("--version").output();
        if prlimit.is_ok_and(|o| o.status.success()) {
            return Some(Limit::FileSize);
        }
        None
    }

    /// The prefix under which the broker runs.
    fn shell_prefix(&self) -> Option<String> {
        match self {
            Limit::Tmpfs(_) => None,
            // Writes past the limit fail with EFBIG instead of killing the process.
            Limit::FileSize => Some("ulimit -S -f 12000; trap '' XFSZ;".into()),
        }
    }

    fn make_room(&self, pid: Option<u32>) {
        let ok = match self {
            Limit::Tmpfs(dir) => Command::new("mount")
                .args(["-o", "remount,size=256m"])
                .arg(dir)
                .status(),
            Limit::FileSize => Command::new("prlimit")
                .arg("--pid")
                .arg(pid.expect("running").to_string())
                .arg("--fsize=unlimited:unlimited")
                .status(),
        };
        assert!(ok.is_ok_and(|s| s.success()), "making room again");
    }
}

impl Drop for Limit {
    fn drop(&mut self) {
        if let Limit::Tmpfs(dir) = self {
            let _ = Command::new("umount").arg("-l").arg(dir).status();
        }
    }
}

fn integrity(db_path: &Path) -> String {
    let c = rusqlite::Connection::open(db_path).expect("open the database");
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity check runs")
}

fn big_batch(n: usize) -> Vec<pb::TaskSpec> {
    (0..n)
        .map(|i| pb::TaskSpec {
            payload: vec![(i % 251) as u8; 64 * 1024],
            ..spec("disk")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_clearly_corrupts_nothing_and_service_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let Some(limit) = Limit::choose(&data) else {
        eprintln!("skipped: cannot mount a tmpfs (not root?) and prlimit is missing");
        return;
    };
    let db_path = data.join("tb.db");
    let url = format!("sqlite://{}", db_path.display());
    let logs = tempfile::tempdir().unwrap();
    let broker = Broker::start_with("broker", logs.path(), &url, &[], limit.shell_prefix()).await;
    let mut c = BrokerServiceClient::new(channel(&broker.url()));

    // Fill the disk: 1 MiB per Submit until one is refused.
    let mut acked: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let refusal = loop {
        assert!(Instant::now() < deadline, "the disk never filled up");
        match c
            .submit(pb::SubmitRequest {
                tasks: big_batch(16),
            })
            .await
        {
            Ok(r) => acked.extend(r.into_inner().results.into_iter().map(|r| r.task_id)),
            Err(s) => break s,
        }
    };
    assert!(
        matches!(refusal.code(), Code::ResourceExhausted | Code::Unavailable),
        "a full disk answers RESOURCE_EXHAUSTED or UNAVAILABLE, got {refusal:?}"
    );
    assert!(!refusal.message().contains('\n'), "{refusal:?}");
    assert!(!acked.is_empty(), "some submits fit before the disk filled");
    // It stays clear while the disk is full; the broker keeps running.
    for _ in 0..3 {
        let s = c
            .submit(pb::SubmitRequest {
                tasks: big_batch(16),
            })
            .await
            .expect_err("still full");
        assert!(
            matches!(s.code(), Code::ResourceExhausted | Code::Unavailable),
            "{s:?}"
        );
    }
    assert_eq!(integrity(&db_path), "ok", "no corruption while full");

    limit.make_room(broker.pid());
    // Service resumes by itself (bounded): a submit is acknowledged again.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c
            .submit(pb::SubmitRequest {
                tasks: big_batch(4),
            })
            .await
        {
            Ok(r) => {
                acked.extend(r.into_inner().results.into_iter().map(|r| r.task_id));
                break;
            }
            Err(s) => {
                assert!(
                    Instant::now() < deadline,
                    "service did not resume after space returned: {s:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    // Every acknowledged task is there and runs to the end.
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < acked.len() {
        assert!(
            Instant::now() < deadline,
            "{done} of {} completed",
            acked.len()
        );
        // 16 x 64 KiB stays under the client's 4 MiB reply limit.
        for t in lease(&mut c, "disk", 16).await {
            c.complete(pb::CompleteRequest {
                task_id: t.task_id,
                lease_token: t.lease_token,
                result: vec![],
                lease_next: None,
            })
            .await
            .expect("complete");
            done += 1;
        }
    }
    let stored = succeeded_ids(&url, "disk").await;
    assert!(
        acked.iter().all(|id| stored.contains(id)),
        "an acknowledged task is missing"
    );
    assert_eq!(stored.len(), acked.len());
    drop(broker);
    assert_eq!(integrity(&db_path), "ok", "no corruption after the episode");
}
