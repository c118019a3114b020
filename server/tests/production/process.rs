//! The broker process: bad configuration, SIGTERM and an unreachable database.

use super::*;

fn broker_bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_taskbroker"))
}

#[test]
fn invalid_configuration_exits_with_one_line_before_binding() {
    let out = broker_bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--retry-jitter", "3"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = err
        .lines()
        .filter(|l| l.starts_with("taskbroker:"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("jitter"), "{err}");
    assert!(out.stdout.is_empty(), "nothing was served");

    let out = broker_bin()
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--insecure"));

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tb.toml");
    std::fs::write(
        &cfg,
        "database_url = \"postgres://tb:hunter2@db/tb\"\n[[auth.tokens]]\nrole = \"admin\"\ntoken = \"very-secret-admin-token\"\n",
    )
    .unwrap();
    let out = broker_bin()
        .args([
            "config",
            "print",
            "--config",
            cfg.to_str().unwrap(),
            "--reclaim-interval",
            "2s",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("reclaim_interval = \"2s\""), "{printed}");
    assert!(printed.contains("postgres://tb:***@db/tb"));
    assert!(
        !printed.contains("hunter2") && !printed.contains("very-secret"),
        "{printed}"
    );
}

/// SIGTERM: waiting long-polls answer empty at once and are granted nothing while
/// the broker drains (their tasks come due during the grace period), a Complete
/// sent as the signal lands is either acknowledged and kept or refused, held
/// leases survive the stop, and the broker exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_long_polls_and_exits_cleanly() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tb.db", dir.path().display());
    let start = |url: String, log: std::path::PathBuf| async move {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskbroker"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            .args(["--database-url", &url, "--shutdown-grace", "30s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut addr, mut metrics) = (String::new(), String::new());
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(a) = l.strip_prefix("taskbroker listening on ") {
                addr = format!("http://{a}");
            }
            if let Some(m) = l.trim().strip_prefix("metrics:  http://") {
                metrics = m.trim_end_matches("/metrics").to_string();
                break;
            }
        }
        // Keep reading: a print into a closed pipe would kill the broker.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (child, addr, metrics)
    };
    let log = dir.path().join("broker.log");
    let (mut child, addr, metrics) = start(url.clone(), log.clone()).await;
    let mut c = BrokerServiceClient::connect(addr.clone()).await.unwrap();
    let held = submit_one(&mut c, spec("held")).await;
    let lease = lease_one(&mut c, "held").await;
    // Due in 8 s: within the grace period, so a broker that kept serving the
    // long-polls would lease them before it exits.
    let due = chrono::Utc::now() + chrono::Duration::seconds(8);
    let ids = submit(
        &mut c,
        vec![
            pb::TaskSpec {
                run_at: ts(due),
                ..spec("due")
            };
            2
        ],
    )
    .await;
    let mut polls = Vec::new();
    for _ in 0..3 {
        let addr = addr.clone();
        polls.push(tokio::spawn(async move {
            let mut c = BrokerServiceClient::connect(addr).await.unwrap();
            let mut req = lease_req("due", 1);
            req.wait = secs(60);
            c.lease(req).await
        }));
    }
    // Wait (bounded) until the broker reports the three long-polls waiting.
    let metrics_addr: std::net::SocketAddr = metrics.parse().unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !scrape(metrics_addr)
        .await
        .contains("taskbroker_lease_waiters 3")
    {
        assert!(
            std::time::Instant::now() < give_up,
            "the polls never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let complete = tokio::spawn({
        let (mut c, lease) = (c.clone(), lease.clone());
        async move {
            c.complete(pb::CompleteRequest {
                task_id: lease.task_id,
                lease_token: lease.lease_token,
                result: b"done".to_vec(),
                lease_next: None,
            })
            .await
        }
    });
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    for p in polls {
        let r = tokio::time::timeout(std::time::Duration::from_secs(30), p)
            .await
            .expect("long-poll answered at once")
            .unwrap();
        let r =
            r.unwrap_or_else(|e| panic!("long-poll answered OK, got {e:?}; log:\n{}", logged()));
        assert!(r.into_inner().tasks.is_empty());
    }
    let completed = complete.await.unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
        .await
        .expect("exits within the grace period")
        .unwrap();
    assert!(
        status.success(),
        "clean exit, got {status:?}; log:\n{}",
        logged()
    );

    // A new broker on the same file: nothing was leased during the drain, the
    // held lease is as it was, or completed if the broker acknowledged it.
    let (_child, addr, _) = start(url, dir.path().join("broker2.log")).await;
    let mut admin = taskbroker_client::pb::admin_service_client::AdminServiceClient::connect(addr)
        .await
        .unwrap();
    for id in &ids {
        let t = get(&mut admin, id).await;
        assert_eq!(t.attempt, 0, "leased while draining: {t:?}");
    }
    let h = get(&mut admin, &held).await;
    match completed {
        Ok(_) => assert_eq!(
            state(&h),
            pb::TaskState::Succeeded,
            "an acknowledged Complete was lost"
        ),
        // Refused (or its answer lost with the connection): either state is
        // fine, as nothing was acknowledged.
        Err(_) => assert!(matches!(
            state(&h),
            pb::TaskState::Leased | pb::TaskState::Succeeded
        )),
    }
}

/// Readiness follows the database: NOT_SERVING while Postgres is away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_flips_while_the_database_is_unreachable() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let app = spawn_on(db.clone(), Options::default()).await;
    let mut ready = readiness(&app.url()).await;
    until(&mut ready, ServingStatus::Serving).await;
    // Take the database away: stop accepting connections to it by terminating its
    // backends and blocking new ones for this database.
    let admin_url = postgres_admin_url().unwrap();
    let name = db.url.rsplit('/').next().unwrap().to_string();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {name} ALLOW_CONNECTIONS false"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&mut conn)
        .await
        .unwrap();
    until(&mut ready, ServingStatus::NotServing).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {name} ALLOW_CONNECTIONS true"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    until(&mut ready, ServingStatus::Serving).await;
    let mut c = app.broker().await;
    submit_one(&mut c, spec("back")).await;
}
