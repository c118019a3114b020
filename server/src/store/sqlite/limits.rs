//! The limits of the gated lease on SQLite ([`LimitRead`]): cooldowns and
//! bucket rows read on the writer's connection in the lease's batch (the one
//! writer serialises every lease), and the bucket charges written in it.

use rusqlite::{Connection, OptionalExtension, params};

use super::super::StoreResult;
use super::super::limits::{LimitRead, Limits, bucket_charges};
use super::admission::json_text;
use super::gated::Reads;
use super::sql;

impl LimitRead for Reads<'_> {
    async fn limit_cooldowns(
        &mut self,
        now: i64,
    ) -> StoreResult<Vec<(String, String, String, i64)>> {
        let mut st = self.c.prepare_cached(sql::LEASE_LIMITS_COOLDOWNS)?;
        let rows = st.query_map(params![now], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn limit_bucket_names(&mut self, qi: usize) -> StoreResult<Vec<String>> {
        let mut st = self.c.prepare_cached(sql::LEASE_LIMITS_BUCKET_NAMES)?;
        let rows = st.query_map(params![self.queues[qi]], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn limit_bucket(&mut self, name: &str) -> StoreResult<Option<(String, f64, i64)>> {
        Ok(self
            .c
            .prepare_cached(sql::LEASE_LIMITS_BUCKET)?
            .query_row(params![name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?)
    }

    async fn limit_bucket_leased(&mut self, name: &str) -> StoreResult<i64> {
        Ok(self
            .c
            .prepare_cached(sql::BUCKET_LEASED)?
            .query_row(params![name], |r| r.get(0))?)
    }

    async fn limit_candidate_buckets(&mut self, seqs: &[i64]) -> StoreResult<Vec<(i64, String)>> {
        let mut st = self.c.prepare_cached(sql::LEASE_LIMITS_CANDIDATE_BUCKETS)?;
        let rows = st.query_map(params![json_text(seqs)?], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// Takes one token per lease granted from each rate-limited bucket charged.
pub(super) fn charge<'a>(
    c: &Connection,
    limits: &'a Limits,
    granted: impl Iterator<Item = &'a str>,
    now: i64,
) -> StoreResult<()> {
    for (name, tokens) in bucket_charges(limits, granted) {
        c.prepare_cached(sql::LEASE_LIMITS_CHARGE)?
            .execute(params![tokens, now, name])?;
    }
    Ok(())
}
