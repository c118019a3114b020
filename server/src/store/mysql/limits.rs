//! The limits of the gated lease on MySQL ([`LimitRead`]): cooldowns and
//! bucket rows read in the lease's job, bucket rows locked (`FOR UPDATE`)
//! after the queue rows, and the bucket charges written in the same job.

use super::super::StoreResult;
use super::super::limits::{LimitRead, Limits, bucket_charges};
use super::gated::Reads;
use super::{Job, sql};

impl LimitRead for Reads<'_, '_> {
    async fn limit_cooldowns(
        &mut self,
        now: i64,
    ) -> StoreResult<Vec<(String, String, String, i64)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_COOLDOWNS)
            .bind(now)
            .fetch_all(self.j.conn())
            .await?)
    }

    async fn limit_bucket_names(&mut self, qi: usize) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(sql::LEASE_LIMITS_BUCKET_NAMES)
            .bind(&self.queues[qi])
            .fetch_all(self.j.conn())
            .await?)
    }

    async fn limit_bucket(&mut self, name: &str) -> StoreResult<Option<(String, f64, i64)>> {
        Ok(sqlx::query_as(sql::LEASE_LIMITS_BUCKET)
            .bind(name)
            .fetch_optional(self.j.conn())
            .await?)
    }

    async fn limit_bucket_leased(&mut self, name: &str) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(sql::BUCKET_LEASED)
            .bind(name)
            .fetch_one(self.j.conn())
            .await?)
    }

    async fn limit_candidate_buckets(&mut self, seqs: &[i64]) -> StoreResult<Vec<(i64, String)>> {
        let list = serde_json::to_string(seqs)
            .map_err(|e| super::super::StoreError::Internal(Box::new(e)))?;
        Ok(sqlx::query_as(sql::LEASE_LIMITS_CANDIDATE_BUCKETS)
            .bind(list)
            .fetch_all(self.j.conn())
            .await?)
    }
}

/// Takes one token per lease granted from each rate-limited bucket charged.
pub(super) async fn charge<'a>(
    j: &mut Job,
    limits: &'a Limits,
    granted: impl Iterator<Item = &'a str>,
    now: i64,
) -> StoreResult<()> {
    for (name, tokens) in bucket_charges(limits, granted) {
        sqlx::query(sql::LEASE_LIMITS_CHARGE)
            .bind(tokens)
            .bind(now)
            .bind(name)
            .execute(j.conn())
            .await?;
    }
    Ok(())
}
