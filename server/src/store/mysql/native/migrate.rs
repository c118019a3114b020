//! Migrations on MySQL/MariaDB, where DDL commits as it goes: a migration that
//! fails part way stays recorded as failed (`success = FALSE` in
//! `_sqlx_migrations`) with what it did before the failure in place, and sqlx
//! refuses every later run until the record is cleared.
//!
//! A migration listed in [`RERUN`] is run again: what a partial run may have
//! left is undone first, then its record is cleared. No broker starts while a
//! migration is recorded as failed, so what that migration created holds nothing
//! a broker wrote (an undo that drops a table first checks it is empty). For any
//! other migration, and for every failure, the error says in one line what the
//! database answered and what to do.

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{MySqlConnection, MySqlPool};

use super::super::super::{StoreError, StoreResult};
use super::super::sql;

/// A migration that may run again after it stopped part way.
struct Rerun {
    version: i64,
    /// A table the undo drops, which must be empty (or absent) for that, and
    /// the statement that counts its rows (0 or 1).
    empty: Option<(&'static str, &'static str)>,
    /// What undoes a partial run (each statement may find nothing to undo).
    undo: &'static [&'static str],
}

const RERUN: &[Rerun] = &[
    // The key-dependency tables (and the trigger an earlier text of this
    // migration created last, where SUPER was missing under binary logging).
    Rerun {
        version: 4,
        empty: Some(("task_key_deps", sql::MIGRATE_4_ROWS)),
        undo: &[
            sql::MIGRATE_4_UNDO_TASK_KEY_DEPS,
            sql::MIGRATE_4_UNDO_KEY_DEPS_LOCK,
        ],
    },
    // Collations: each statement converts a table, which may be done again.
    Rerun {
        version: 5,
        empty: None,
        undo: &[],
    },
    // The attempts view, replaced by one statement that may be done again.
    Rerun {
        version: 11,
        empty: None,
        undo: &[],
    },
];

const TABLE: &str = "_sqlx_migrations";

/// Applies the pending migrations of `m`, after clearing a failed one that may
/// run again. Replicas starting together take turns (a lock on the database).
pub(crate) async fn run(m: &Migrator, pool: &MySqlPool) -> StoreResult<()> {
    let mut conn = pool.acquire().await?;
    sqlx::query(sql::MIGRATE_LOCK).execute(&mut *conn).await?;
    let result = match drop_earlier_trigger(&mut conn).await {
        Ok(()) => clear_failed(m, &mut conn).await,
        Err(e) => Err(e),
    };
    let result = match result {
        // `run_direct` is `run` on a connection (`run` cannot take one inside
        // an async trait method: sqlx's "Acquire is not general enough").
        Ok(()) => m
            .run_direct(None, &mut *conn, false)
            .await
            .map_err(|e| StoreError::Config(explain(m, &e))),
        Err(e) => Err(e),
    };
    // The lock goes with the connection too, if this fails.
    let _ = sqlx::query(sql::MIGRATE_UNLOCK).execute(&mut *conn).await;
    result
}

/// The trigger the first text of migration 4 created (key waits now bind in
/// the broker). It is dropped here rather than in a migration: MariaDB refuses
/// DROP TRIGGER, even `IF EXISTS` of no trigger, to a user without SUPER where
/// binary logging is on, and MySQL cannot prepare it, so only a database that
/// has the trigger runs the statement (as a user who could create it).
async fn drop_earlier_trigger(conn: &mut MySqlConnection) -> StoreResult<()> {
    let present: i64 = sqlx::query_scalar(sql::MIGRATE_TRIGGER_PRESENT)
        .fetch_one(&mut *conn)
        .await?;
    if present == 0 {
        return Ok(());
    }
    sqlx::query(sql::MIGRATE_TRIGGER_DROP)
        .execute(&mut *conn)
        .await
        .map_err(|e| {
            StoreError::Config(format!(
                "cannot drop the trigger tasks_flow_bind_keys that an earlier migration 4 \
                 created: {}; drop it as a user who may, then start the broker again",
                database_message(&e)
            ))
        })?;
    tracing::info!("dropped the trigger tasks_flow_bind_keys: key waits bind in the broker");
    Ok(())
}

/// Clears the record of a failed migration that may run again (undoing what
/// it left); refuses, saying what to do, for one that may not.
async fn clear_failed(m: &Migrator, conn: &mut MySqlConnection) -> StoreResult<()> {
    let recorded: i64 = sqlx::query_scalar(sql::MIGRATE_TABLE_EXISTS)
        .bind(TABLE)
        .fetch_one(&mut *conn)
        .await?;
    if recorded == 0 {
        return Ok(());
    }
    let failed: Option<(i64, i64)> = sqlx::query_as(sql::MIGRATE_FAILED)
        .fetch_optional(&mut *conn)
        .await?;
    let Some((version, last)) = failed else {
        return Ok(());
    };
    // Only the last migration recorded: with later ones applied, running it
    // again would not give the schema they were applied to.
    let rerun = RERUN
        .iter()
        .find(|r| r.version == version && version == last);
    let Some(rerun) = rerun else {
        return Err(StoreError::Config(format!(
            "{} is recorded as failed in `{TABLE}` (it stopped part way); {}",
            name(m, version),
            manual(version)
        )));
    };
    if let Some((table, count)) = rerun.empty {
        let rows: i64 = sqlx::query_scalar(sql::MIGRATE_TABLE_EXISTS)
            .bind(table)
            .fetch_one(&mut *conn)
            .await?;
        let rows = if rows == 0 {
            0
        } else {
            sqlx::query_scalar::<_, i64>(count)
                .fetch_one(&mut *conn)
                .await?
        };
        if rows > 0 {
            return Err(StoreError::Config(format!(
                "{} is recorded as failed in `{TABLE}`, but its table {table} holds rows; {}",
                name(m, version),
                manual(version)
            )));
        }
    }
    tracing::warn!(
        version,
        "migration {} is recorded as failed; undoing what it left and running it again",
        name(m, version)
    );
    for statement in rerun.undo {
        sqlx::query(*statement).execute(&mut *conn).await?;
    }
    sqlx::query(sql::MIGRATE_CLEAR_FAILED)
        .bind(version)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// A migration as the operator finds it: its number and file.
fn name(m: &Migrator, version: i64) -> String {
    match m.iter().find(|x| x.version == version) {
        Some(x) => format!(
            "migration {version} (migrations/mysql/{version:04}_{}.sql)",
            x.description.replace(' ', "_")
        ),
        None => format!("migration {version}"),
    }
}

/// What to do about a failed migration that is not run again by itself.
fn manual(version: i64) -> String {
    // Not run here: the statement the operator runs.
    format!(
        "undo what that file created, then run `DELETE FROM {TABLE} WHERE version = {version}` \
         and start the broker again"
    )
}

/// One line for the operator: which migration failed, the database's own
/// message, and what happens next.
fn explain(m: &Migrator, e: &MigrateError) -> String {
    let line = match e {
        MigrateError::ExecuteMigration(source, version) => {
            let next = if RERUN.iter().any(|r| r.version == *version) {
                "it is recorded as failed and runs again at the next start".to_owned()
            } else {
                format!("it is recorded as failed: {}", manual(*version))
            };
            format!(
                "{} failed: {}; {next}",
                name(m, *version),
                database_message(source)
            )
        }
        MigrateError::Execute(source) => database_message(source),
        MigrateError::Dirty(version) => format!(
            "{} is recorded as failed in `{TABLE}`; {}",
            name(m, *version),
            manual(*version)
        ),
        other => other.to_string(),
    };
    line.replace(['\n', '\r'], " ")
}

/// The database's message and number, or the driver's error.
fn database_message(e: &sqlx::Error) -> String {
    let Some(db) = e.as_database_error() else {
        return e.to_string();
    };
    match db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        Some(my) => format!("error {}: {}", my.number(), my.message()),
        None => db.message().to_owned(),
    }
}
