//! The limits of the gated lease on Postgres ([`LimitRead`]): cooldowns and
//! bucket rows read in the lease's transaction, bucket rows locked
//! (`FOR UPDATE`) after the queue rows, and the bucket charges written in it.

use super::super::StoreResult;
use super::super::limits::{LimitRead, Limits, bucket_charges};
use super::gated::{Reads, Tx};
use super::sql;

impl LimitRead for Reads<'_, '_, '_> {
    async fn limit_cooldowns(
        &mut self,
        now: i64,
    ) -> StoreResult<Vec<(String, String, String, i64)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_COOLDOWNS)
            .bind(now)
            .fetch_all(&mut **self.tx)
            .await?)
    }

    async fn limit_bucket_names(&mut self, qi: usize) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(sql::LEASE_LIMITS_BUCKET_NAMES)
            .bind(&self.queues[qi])
            .fetch_all(&mut **self.tx)
            .await?)
    }

    async fn limit_bucket(&mut self, name: &str) -> StoreResult<Option<(String, f64, i64)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_BUCKET)
            .bind(name)
            .fetch_optional(&mut **self.tx)
            .await?)
    }

    async fn limit_bucket_leased(&mut self, name: &str) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::BUCKET_LEASED)
            .bind(name)
            .fetch_one(&mut **self.tx)
            .await?)
    }

    async fn limit_candidate_buckets(&mut self, seqs: &[i64]) -> StoreResult<Vec<(i64, String)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_CANDIDATE_BUCKETS)
            .bind(seqs)
            .fetch_all(&mut **self.tx)
            .await?)
    }
}

/// Takes one token per lease granted from each rate-limited bucket charged.
pub(super) async fn charge<'a>(
    tx: &mut Tx<'_>,
    limits: &'a Limits,
    granted: impl Iterator<Item = &'a str>,
    now: i64,
) -> StoreResult<()> {
    for (name, tokens) in bucket_charges(limits, granted) {
        sqlx::query(sql::LEASE_LIMITS_CHARGE)
            .bind(tokens)
            .bind(now)
            .bind(name)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
