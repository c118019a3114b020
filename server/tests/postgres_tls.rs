//! Postgres over TLS, against a cluster with `ssl=on` that refuses plaintext TCP
//! (`scripts/pg.sh start-tls`): the broker's store connects with `sslmode=require`,
//! serves tasks, and every one of its connections is encrypted (pg_stat_ssl);
//! `verify-full` holds with the cluster's CA (from the URL's `sslrootcert`, or from
//! PGSSLROOTCERT as the chart sets it) and fails without it.
//!
//! Skipped, with the reason printed, unless TASKBROKER_TEST_POSTGRES_TLS_URL and
//! TASKBROKER_TEST_POSTGRES_TLS_CA are set (scripts/test.sh sets them, and
//! TASKBROKER_REQUIRE_POSTGRES_TLS, which turns the skip into a failure).

mod common;

use std::sync::Arc;

use common::*;
use sqlx::Connection;
use taskbroker_client::pb;

struct TlsCluster {
    /// `postgres://postgres@localhost:PORT/postgres?sslmode=require`
    admin_url: String,
    ca: String,
}

fn tls_cluster() -> Option<TlsCluster> {
    let url = std::env::var("TASKBROKER_TEST_POSTGRES_TLS_URL").unwrap_or_default();
    let ca = std::env::var("TASKBROKER_TEST_POSTGRES_TLS_CA").unwrap_or_default();
    if url.is_empty() || ca.is_empty() {
        assert!(
            std::env::var("TASKBROKER_REQUIRE_POSTGRES_TLS").is_err(),
            "TASKBROKER_TEST_POSTGRES_TLS_URL/_CA are not set but the TLS test is required"
        );
        eprintln!(
            "skipped: TASKBROKER_TEST_POSTGRES_TLS_URL and TASKBROKER_TEST_POSTGRES_TLS_CA are not set \
             (eval \"$(scripts/pg.sh start-tls DIR)\" sets them)"
        );
        return None;
    }
    Some(TlsCluster { admin_url: url, ca })
}

impl TlsCluster {
    /// The URL of database `db` with `query` instead of the admin URL's parameters.
    fn url(&self, db: &str, query: &str) -> String {
        let base = self
            .admin_url
            .split_once('?')
            .map_or(&*self.admin_url, |(b, _)| b);
        let server = base.rsplit_once('/').expect("the URL has a path").0;
        format!("{server}/{db}?{query}")
    }

    async fn admin(&self) -> sqlx::PgConnection {
        sqlx::PgConnection::connect(&self.admin_url)
            .await
            .expect("connect to the TLS cluster with sslmode=require")
    }
}

async fn ssl_of_this_connection(conn: &mut sqlx::PgConnection) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_runs_on_postgres_over_tls_with_sslmode_require() {
    let Some(cluster) = tls_cluster() else {
        return;
    };
    let mut admin = cluster.admin().await;
    assert!(
        ssl_of_this_connection(&mut admin).await,
        "sslmode=require gave a connection without TLS"
    );
    let db = format!("tb_tls_{}", std::process::id());
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db}")))
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&mut admin)
        .await
        .unwrap();

    // The whole broker on the TLS URL: migrations, then tasks through gRPC.
    let url = cluster.url(&db, "sslmode=require");
    let app = spawn_on(Arc::new(TestDb::from_url(url.clone())), Options::default()).await;
    let mut c = app.broker().await;
    let id = submit_one(&mut c, spec("tls")).await;
    let leased = lease_one(&mut c, "tls").await;
    assert_eq!(leased.task_id, id);
    c.complete(pb::CompleteRequest {
        task_id: leased.task_id,
        lease_token: leased.lease_token,
        ..Default::default()
    })
    .await
    .unwrap();

    // Every connection the broker holds to its database is encrypted.
    let (total, encrypted): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
         JOIN pg_stat_ssl s ON s.pid = a.pid WHERE a.datname = $1",
    )
    .bind(&db)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(total > 0, "the broker holds connections to {db}");
    assert_eq!(encrypted, total, "every broker connection uses TLS");
    app.shutdown().await;

    // The cluster refuses plaintext, so the above could only have worked over TLS.
    let plain = taskbroker_server::store::connect(&cluster.url(&db, "sslmode=disable"), 1).await;
    assert!(
        plain.is_err(),
        "the cluster accepted a plaintext connection"
    );

    // verify-full: the throwaway CA is in no public root store; with it, the server's
    // certificate (for localhost) verifies.
    let with_ca = cluster.url(
        &db,
        &format!("sslmode=verify-full&sslrootcert={}", cluster.ca),
    );
    let store = taskbroker_server::store::connect(&with_ca, 1)
        .await
        .expect("verify-full with the cluster's CA");
    store.ping().await.unwrap();
    store.close().await;
    let without_ca =
        taskbroker_server::store::connect(&cluster.url(&db, "sslmode=verify-full"), 1).await;
    assert!(without_ca.is_err(), "verify-full trusted an unknown CA");
}

/// What the chart does: the URL says nothing about TLS, PGSSLMODE and PGSSLROOTCERT
/// do (the real binary, as the migration Job runs it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgsslmode_and_pgsslrootcert_from_the_environment_are_honoured() {
    let Some(cluster) = tls_cluster() else {
        return;
    };
    let url = cluster.url("postgres", "application_name=tls-env-test");
    let migrate = |mode: &str, ca: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_taskbroker"));
        cmd.args(["migrate", "--database-url", &url])
            .env("PGSSLMODE", mode)
            .env_remove("PGSSLROOTCERT")
            .env_remove("TASKBROKER_DATABASE_URL");
        if let Some(ca) = ca {
            cmd.env("PGSSLROOTCERT", ca);
        }
        cmd.output().expect("the binary runs")
    };
    let ok = migrate("verify-full", Some(&cluster.ca));
    assert!(
        ok.status.success(),
        "migrate with PGSSLMODE=verify-full and PGSSLROOTCERT failed: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = migrate("verify-full", None);
    assert!(
        !refused.status.success(),
        "verify-full without the CA passed"
    );
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    let plain = migrate("disable", None);
    assert!(!plain.status.success(), "the cluster accepted plaintext");
}
