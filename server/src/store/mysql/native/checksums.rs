//! Migrations whose text changed after they shipped: a database that applied
//! the earlier text records its checksum, which sqlx refuses ("previously
//! applied but has been modified"). Before migrating, the recorded checksum of
//! each such version is rewritten to the current file's, only where it is
//! exactly the earlier text's, so a database keeps starting and any other
//! difference is still refused.
//!
//! Version 4 (`0004_flow_keys.sql`) created a trigger, which needs SUPER where
//! binary logging is on; its text now creates the same tables without it. The
//! trigger the earlier text made is dropped before migrating, where it exists
//! (`native/migrate.rs`).

use sqlx::MySqlPool;
use sqlx::migrate::Migrator;

use super::super::sql;

/// (version, SHA-384 of the text it shipped with, as hex).
const EARLIER: &[(i64, &str)] = &[(
    4,
    "a6113a5f7bb040743714df4b9f8ed5fe15c075d7c043ba28a250a15b700137ea\
     00f7ed01a2386ca7aa549bec11d5b4fd",
)];

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// Rewrites the recorded checksums of [`EARLIER`] versions applied with their
/// earlier text. Nothing to do on a database not migrated yet.
pub(crate) async fn rewrite_earlier(pool: &MySqlPool, migrator: &Migrator) -> sqlx::Result<()> {
    let recorded: Option<i64> = sqlx::query_scalar(sql::CHECKSUMS_RECORDED)
        .fetch_optional(pool)
        .await?;
    if recorded.is_none() {
        return Ok(());
    }
    for &(version, earlier) in EARLIER {
        let Some(now) = migrator.iter().find(|m| m.version == version) else {
            continue;
        };
        sqlx::query(sql::CHECKSUMS_REWRITE)
            .bind(&*now.checksum)
            .bind(version)
            .bind(unhex(earlier))
            .execute(pool)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earlier_checksums_are_of_other_texts_than_the_current_ones() {
        for &(version, earlier) in EARLIER {
            let earlier = unhex(earlier);
            assert_eq!(earlier.len(), 48, "a SHA-384");
            let now = super::super::super::MIGRATOR
                .iter()
                .find(|m| m.version == version)
                .expect("the version exists");
            assert_ne!(&*now.checksum, earlier.as_slice());
        }
    }
}
