//! Limit buckets and cooldowns on `Client`: a bucket's settings (get, list,
//! update by field mask, delete) and use, and the live cooldowns workers set
//! (list, lift). A worker sets a cooldown by failing with
//! `TaskError::cool_down_key` or `TaskError::cool_down_bucket`.

use crate::pb;
use crate::{Client, Error};

/// The changes `Client::update_bucket` makes to a bucket (defining it if need
/// be); only the fields set here are sent in the update mask.
#[derive(Debug, Clone)]
pub struct BucketUpdate {
    name: String,
    config: pb::BucketConfig,
    paths: Vec<String>,
}

impl BucketUpdate {
    pub fn new(name: impl Into<String>) -> Self {
        BucketUpdate {
            name: name.into(),
            config: pb::BucketConfig::default(),
            paths: Vec::new(),
        }
    }

    fn set(mut self, path: &str, f: impl FnOnce(&mut pb::BucketConfig)) -> Self {
        f(&mut self.config);
        if !self.paths.iter().any(|p| p == path) {
            self.paths.push(path.to_string());
        }
        self
    }

    /// Leases per second to the bucket's tasks together (burst 0: one second's
    /// worth); `None` = no limit.
    pub fn rate_limit(self, per_second: Option<f64>, burst: u32) -> Self {
        self.set("rate_limit", |c| {
            c.rate_limit = per_second.map(|per_second| pb::RateLimit { per_second, burst })
        })
    }

    /// Leases the bucket's tasks hold at once; 0 = no limit.
    pub fn max_concurrent(self, n: u32) -> Self {
        self.set("max_concurrent", |c| c.max_concurrent = n)
    }

    /// Whether any field is set.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub(crate) fn into_proto(self) -> pb::UpdateBucketRequest {
        pb::UpdateBucketRequest {
            name: self.name,
            config: Some(self.config),
            update_mask: Some(prost_types::FieldMask { paths: self.paths }),
        }
    }
}

/// What `Client::lift_cooldown` ends: a queue's concurrency key, or a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CooldownOf {
    Key { queue: String, key: String },
    Bucket(String),
}

fn bucket(b: Option<pb::LimitBucket>) -> Result<pb::LimitBucket, Error> {
    b.ok_or(Error::Malformed("bucket"))
}

impl Client {
    /// A bucket's settings, use now, and cooldown.
    pub async fn get_bucket(&self, name: &str) -> Result<pb::LimitBucket, Error> {
        let req = pb::GetBucketRequest {
            name: name.to_string(),
        };
        bucket(
            self.admin_stub()
                .get_bucket(self.request(req))
                .await?
                .into_inner()
                .bucket,
        )
    }

    /// Every defined bucket, by name.
    pub async fn list_buckets(&self) -> Result<Vec<pb::LimitBucket>, Error> {
        Ok(self
            .admin_stub()
            .list_buckets(self.request(pb::ListBucketsRequest {}))
            .await?
            .into_inner()
            .buckets)
    }

    /// Changes the fields set in `update`, defining the bucket if need be.
    pub async fn update_bucket(&self, update: BucketUpdate) -> Result<pb::LimitBucket, Error> {
        bucket(
            self.admin_stub()
                .update_bucket(self.request(update.into_proto()))
                .await?
                .into_inner()
                .bucket,
        )
    }

    /// Removes a bucket; its tasks lease without its limits.
    pub async fn delete_bucket(&self, name: &str) -> Result<(), Error> {
        let req = pb::DeleteBucketRequest {
            name: name.to_string(),
        };
        self.admin_stub().delete_bucket(self.request(req)).await?;
        Ok(())
    }

    /// The live cooldowns, of one queue's keys or one bucket when given.
    pub async fn list_cooldowns(
        &self,
        queue: Option<&str>,
        bucket: Option<&str>,
    ) -> Result<Vec<pb::CooldownHold>, Error> {
        let req = pb::ListCooldownsRequest {
            queue: queue.unwrap_or_default().to_string(),
            bucket: bucket.unwrap_or_default().to_string(),
        };
        Ok(self
            .admin_stub()
            .list_cooldowns(self.request(req))
            .await?
            .into_inner()
            .cooldowns)
    }

    /// Ends a cooldown now; false when there was none.
    pub async fn lift_cooldown(&self, of: CooldownOf) -> Result<bool, Error> {
        let req = match of {
            CooldownOf::Key { queue, key } => pb::LiftCooldownRequest {
                queue,
                concurrency_key: key,
                bucket: String::new(),
            },
            CooldownOf::Bucket(bucket) => pb::LiftCooldownRequest {
                bucket,
                ..Default::default()
            },
        };
        Ok(self
            .admin_stub()
            .lift_cooldown(self.request(req))
            .await?
            .into_inner()
            .lifted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_names_each_field_set_once() {
        let req = BucketUpdate::new("b")
            .max_concurrent(3)
            .max_concurrent(4)
            .rate_limit(Some(20.0), 20)
            .into_proto();
        let c = req.config.unwrap();
        assert_eq!(c.max_concurrent, 4);
        assert_eq!(c.rate_limit.unwrap().burst, 20);
        assert_eq!(
            req.update_mask.unwrap().paths,
            ["max_concurrent", "rate_limit"]
        );
    }
}
