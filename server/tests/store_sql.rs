//! The store's `.sql` files against the real databases: every named statement
//! of a backend is one its database accepts (prepared on a migrated schema, so a
//! column or table it names exists), and `taskbroker sql` prints what runs.

mod common;

use common::*;
use sqlx::{Executor, SqlSafeStr};
use taskbroker_server::store::{self, sql::Statement};

fn statements(backend: &str) -> Vec<&'static Statement> {
    store::sql::statements(backend)
        .expect("a backend")
        .iter()
        .filter(|s| !s.piece)
        .collect()
}

async fn every_statement_prepares(backend: Backend) {
    let Some(db) = test_db(backend).await else {
        return;
    };
    let name = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
        Backend::Mysql => "mysql",
    };
    // The broker's own migrations make the schema the statements run on.
    let s = store::connect(&db.url, 1).await.expect("connect");
    s.migrate().await.expect("migrate");
    s.close().await;
    let mut refused = Vec::new();
    match backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
            for st in statements(name) {
                if let Err(e) = pool.prepare(st.text.into_sql_str()).await {
                    refused.push(format!("{} ({}): {e}", st.name, st.file));
                }
            }
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            for st in statements(name) {
                match pool.prepare(st.text.into_sql_str()).await {
                    Ok(_) => {}
                    // The broker binds each parameter with its type; prepared
                    // bare, a parameter used only as `$n IS NULL` has none, and
                    // one compared with two columns of other types (`$1 > $6` and
                    // `run_at = $1`) gets two guesses. The statement parsed and
                    // its names resolved before either error.
                    Err(e)
                        if e.to_string().contains("could not determine data type")
                            || e.to_string().contains("inconsistent types deduced") => {}
                    Err(e) => refused.push(format!("{} ({}): {e}", st.name, st.file)),
                }
            }
        }
        Backend::Mysql => {
            let pool = sqlx::MySqlPool::connect(&db.url).await.unwrap();
            for st in statements(name) {
                if let Err(e) = pool.prepare(st.text.into_sql_str()).await {
                    refused.push(format!("{} ({}): {e}", st.name, st.file));
                }
            }
        }
    }
    assert!(
        refused.is_empty(),
        "{name} refuses {} statements:\n{}",
        refused.len(),
        refused.join("\n")
    );
}

all_backends!(every_statement_prepares);

/// `taskbroker sql STORE` lists every statement; `taskbroker sql STORE NAME`
/// prints the one statement with its fragments expanded; a name that does not
/// exist and a store that does not exist are one plain line and a failure.
#[test]
fn the_sql_command_prints_statements_as_they_run() {
    let bin = env!("CARGO_BIN_EXE_taskbroker");
    for backend in ["sqlite", "postgres", "mysql"] {
        let out = std::process::Command::new(bin)
            .args(["sql", backend])
            .output()
            .unwrap();
        assert!(out.status.success());
        let listed = String::from_utf8(out.stdout).unwrap();
        let all = store::sql::statements(backend).unwrap();
        assert_eq!(listed.lines().count(), all.len(), "{backend}");
        if let Some(first) = all.first() {
            let out = std::process::Command::new(bin)
                .args(["sql", backend, first.name])
                .output()
                .unwrap();
            assert!(out.status.success());
            let text = String::from_utf8(out.stdout).unwrap();
            assert_eq!(text.trim_end(), format!("{};", first.text));
            assert!(!text.contains("${"), "fragments are expanded");
        }
        let out = std::process::Command::new(bin)
            .args(["sql", backend, "no_such_statement"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("no statement no_such_statement"), "{err}");
    }
    let out = std::process::Command::new(bin)
        .args(["sql", "oracle"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("sqlite, postgres or mysql"));
}
