//! A producer's MySQL/MariaDB database for the outbox tests: a fresh database on the
//! server of TASKBROKER_TEST_MYSQL_URL (scripts/mysql.sh starts a throwaway one),
//! dropped at the end. Without the variable the tests are skipped, unless
//! TASKBROKER_REQUIRE_MYSQL is set, when they fail.

#![allow(dead_code)]

use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

/// The server's URL, or `None` (the test is skipped).
pub fn mysql_admin_url() -> Option<String> {
    match std::env::var("TASKBROKER_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("TASKBROKER_REQUIRE_MYSQL").is_err(),
                "TASKBROKER_TEST_MYSQL_URL is not set but MySQL tests are required"
            );
            eprintln!("skipped: TASKBROKER_TEST_MYSQL_URL is not set");
            None
        }
    }
}

/// A database of its own, dropped when this is.
pub struct MySqlDb {
    pub url: String,
    admin: String,
    name: String,
}

impl MySqlDb {
    pub async fn create() -> Option<MySqlDb> {
        let admin = mysql_admin_url()?;
        let name = format!("outbox_{:016x}", rand::random::<u64>());
        let pool = MySqlPool::connect(&admin).await.expect("connect to MySQL");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&pool)
            .await
            .expect("create a database");
        pool.close().await;
        let base = admin.rsplit_once('/').expect("a database in the URL").0;
        Some(MySqlDb {
            url: format!("{base}/{name}"),
            admin,
            name,
        })
    }

    pub async fn pool(&self, connections: u32) -> MySqlPool {
        MySqlPoolOptions::new()
            .max_connections(connections)
            .connect(&self.url)
            .await
            .expect("connect to the producer's database")
    }
}

impl Drop for MySqlDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Dropped outside any runtime's worker: a thread of its own runs the DROP.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok(pool) = MySqlPool::connect(&admin).await {
                    // A failed test may leave a transaction open on it: give up
                    // rather than wait for its locks.
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "SET SESSION lock_wait_timeout = 5; DROP DATABASE IF EXISTS {name}"
                    )))
                    .execute(&pool)
                    .await;
                }
            });
        })
        .join();
    }
}
