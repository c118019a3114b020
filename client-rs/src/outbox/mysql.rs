//! The outbox in the producer's MySQL (8.0.13 or later) or MariaDB (10.6 or later):
//! [`enqueue`] writes a row of `taskbroker_outbox` (`migrations/outbox/mysql/`) in the
//! caller's transaction; [`super::Relay`] ships committed rows from a `MySqlPool` as
//! from a `PgPool`.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
//! use taskbroker_client::{TaskSpec, outbox};
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id, total) VALUES (?, ?)")
//!     .bind(42_i64)
//!     .bind(1999_i64)
//!     .execute(&mut *tx)
//!     .await?;
//! let spec = TaskSpec::new("emails", br#"{"order":42}"#.to_vec());
//! let row = outbox::mysql::enqueue(&mut tx, spec).await?;
//! tx.commit().await?; // the task exists once the relay has shipped the row
//! println!("task key {}", row.key);
//! # Ok(()) }
//! ```

use sqlx::{Acquire, MySql, MySqlConnection};

use super::{Enqueued, KEY_PREFIX, OutboxError, prepare};
use crate::TaskSpec;

/// The schema of the outbox table, as shipped in `migrations/outbox/mysql/`.
pub const SCHEMA: &str = include_str!("../../outbox-sql/mysql/0001_outbox.sql");

/// Writes `spec` into `taskbroker_outbox` through `conn`: the caller's transaction
/// (`&mut tx` coerces) or a connection (then the row commits by itself, under
/// autocommit). The task is submitted by the relay after the transaction commits, and
/// never if it rolls back. The checks and the trace context are those of
/// [`super::enqueue`].
pub async fn enqueue(conn: &mut MySqlConnection, spec: TaskSpec) -> Result<Enqueued, OutboxError> {
    let mut rows = enqueue_many(conn, [spec]).await?;
    rows.pop()
        .ok_or_else(|| OutboxError::Database(sqlx::Error::Protocol("INSERT wrote no row".into())))
}

/// Writes several specs, in order; the rows are shipped in that order. All are
/// checked before any is written. One INSERT per row: MySQL has no RETURNING, and the
/// id of each row is read from its own statement (the ids of a multi-row INSERT are
/// not consecutive under `auto_increment_increment`, as on Galera).
pub async fn enqueue_many(
    conn: &mut MySqlConnection,
    specs: impl IntoIterator<Item = TaskSpec>,
) -> Result<Vec<Enqueued>, OutboxError> {
    let prepared = prepare(specs)?;
    let mut rows = Vec::with_capacity(prepared.len());
    for (key, body) in prepared {
        let key = key.unwrap_or_else(random_key);
        let done =
            sqlx::query("INSERT INTO taskbroker_outbox (idempotency_key, spec) VALUES (?, ?)")
                .bind(&key)
                .bind(body)
                .execute(&mut *conn)
                .await?;
        let id = i64::try_from(done.last_insert_id()).map_err(|_| {
            OutboxError::Database(sqlx::Error::Protocol("row id out of range".into()))
        })?;
        rows.push(Enqueued { id, key });
    }
    Ok(rows)
}

/// Applies [`SCHEMA`] (idempotent: `CREATE TABLE IF NOT EXISTS`, so several relays
/// starting together do not race).
pub async fn init_schema<'c, A>(conn: A) -> Result<(), sqlx::Error>
where
    A: Acquire<'c, Database = MySql>,
{
    let mut conn = conn.acquire().await?;
    sqlx::raw_sql(SCHEMA).execute(&mut *conn).await?;
    Ok(())
}

/// `outbox:` and a random (version 4) UUID, as the Postgres table's default writes.
fn random_key() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{KEY_PREFIX}{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_random_key_is_a_version_4_uuid_after_the_prefix() {
        let k = random_key();
        let uuid = k.strip_prefix(KEY_PREFIX).expect("prefix");
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "4");
        assert!(matches!(&uuid[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(random_key(), k);
    }

    #[test]
    fn the_shipped_schema_is_the_migration_file() {
        assert!(SCHEMA.contains("CREATE TABLE IF NOT EXISTS taskbroker_outbox"));
        assert!(SCHEMA.contains(&format!("concat('{KEY_PREFIX}', uuid())")));
        assert!(SCHEMA.contains("ENGINE = InnoDB"));
    }
}
