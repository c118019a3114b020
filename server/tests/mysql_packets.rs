//! MySQL/MariaDB: concurrent Submits that each fit the server's
//! `max_allowed_packet` are combined into statements that fit it too (the
//! broker reads the server's limit when it connects and cuts multi-row inserts
//! by bytes as well as rows).

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::app::ServerOptions;
use taskbroker_server::service::Settings;

/// Four Submits at once, each of eight tasks whose payloads fit one statement
/// while all four together are over `max_allowed_packet` (combined into one
/// statement, they were refused: error 1153). Every one is acknowledged, and
/// every task stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submits_over_max_allowed_packet_together_all_succeed() {
    let Some(db) = test_db(Backend::Mysql).await else {
        return;
    };
    let mut conn = <sqlx::MySqlConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    let packet: i64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    // A Submit stores 8 MiB at most (domain/bounds.rs): payloads of 1,000,000
    // bytes, or less on a server whose packet is under 10 MB.
    let payload = usize::try_from((packet / 10).min(1_000_000)).unwrap();
    assert!(
        4 * 8 * payload as i64 > packet,
        "the test server's max_allowed_packet ({packet}) holds four Submits at once; \
         scripts/mysql.sh sets 16 MiB"
    );
    let mut settings = Settings::default();
    settings.limits.max_payload_bytes = payload;
    let app = spawn_on(
        std::sync::Arc::new(db),
        Options {
            settings,
            server: Some(ServerOptions {
                max_message_bytes: 8 * payload + (1 << 20),
                request_timeout: Duration::from_secs(120),
                ..ServerOptions::default()
            }),
            ..Options::default()
        },
    )
    .await;
    let c = app.broker().await;
    let submit = |n: u8| {
        let mut c = c.clone();
        async move {
            let tasks = (0..8)
                .map(|_| pb::TaskSpec {
                    payload: vec![b'a' + n; payload],
                    ..spec("big")
                })
                .collect();
            c.submit(pb::SubmitRequest { tasks }).await
        }
    };
    let (a, b, c3, d) = tokio::join!(submit(0), submit(1), submit(2), submit(3));
    for (n, r) in [a, b, c3, d].into_iter().enumerate() {
        let r = r.unwrap_or_else(|e| panic!("submit {n}: {e:?}"));
        assert_eq!(r.into_inner().results.len(), 8);
    }
    let stored: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT CAST(COUNT(*) AS SIGNED), CAST(SUM(LENGTH(payload)) AS SIGNED) \
         FROM tasks WHERE queue = 'big' GROUP BY LEFT(payload, 1)",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(stored.len(), 4, "{stored:?}");
    for (count, bytes) in stored {
        assert_eq!(count, 8);
        assert_eq!(bytes, 8 * payload as i64);
    }
}
