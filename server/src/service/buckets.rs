//! Limit buckets and cooldowns: the operator calls (Get/List/Update/Delete
//! Bucket, ListCooldowns, LiftCooldown), the cooldown a failing worker sets,
//! and the snapshot that decides which queues take the gated lease for them.
//!
//! A bucket is stored (`limit_buckets`) and read under its row's lock by every
//! gated lease that may charge it, so its limits hold for the whole cluster. A
//! task counts against a bucket through its `taskbroker.bucket` metadata entry,
//! set at submit from `TaskSpec.bucket` or else its queue's bucket. A queue
//! takes the gated lease while its settings name a bucket, a task of it named
//! one, or a cooldown holds one of its keys; every replica reloads that
//! snapshot with the queue settings (twice a second), and the replica that
//! changes it at once.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Broker, ServiceError};
use crate::domain::bucket::{
    self, BucketConfig, BucketUse, CooldownAsk, CooldownScope, CooldownTarget,
};
use crate::domain::model::TaskRecord;
use crate::domain::validate::{self, Invalid};
use crate::store::{BucketPut, CooldownPut, CooldownRecord, StoreResult, StoredBucket};

/// Which queues take the gated lease for buckets and cooldowns.
#[derive(Debug, Clone, Default)]
pub struct LimitQueues {
    /// Queues whose tasks named a bucket themselves.
    pub bucketed: HashSet<String>,
    /// Queues with a live cooldown of one of their keys, with its latest end
    /// (a bucket's cooldown holds only tasks of queues gated for the bucket).
    pub cooled: HashMap<String, DateTime<Utc>>,
}

/// The shared snapshot of [`LimitQueues`].
#[derive(Debug, Clone, Default)]
pub struct LiveLimits(Arc<RwLock<Arc<LimitQueues>>>);

impl LiveLimits {
    pub fn snapshot(&self) -> Arc<LimitQueues> {
        // A poisoned lock still holds a whole value (it is only ever replaced).
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn update(&self, f: impl FnOnce(&mut LimitQueues)) {
        let mut guard = self.0.write().unwrap_or_else(|p| p.into_inner());
        let mut v = (**guard).clone();
        f(&mut v);
        *guard = Arc::new(v);
    }

    /// Whether `queue` takes the gated lease for a bucket or a cooldown.
    pub fn gates(&self, queue: &str) -> bool {
        let s = self.snapshot();
        s.bucketed.contains(queue) || s.cooled.contains_key(queue)
    }
}

/// A bucket as GetBucket answers it: settings, use now, cooldown.
#[derive(Debug, Clone)]
pub struct BucketView {
    pub name: String,
    pub config: BucketConfig,
    pub tokens: f64,
    pub leased: u64,
    pub updated_at: DateTime<Utc>,
    pub cooldown_until: Option<DateTime<Utc>>,
}

/// Applies the fields an update mask names from `patch` to `config`.
pub fn apply_bucket_mask(
    config: &mut BucketConfig,
    patch: &BucketConfig,
    paths: &[String],
) -> Result<(), Invalid> {
    if paths.is_empty() {
        return Err(Invalid::new("update_mask", "must name at least one field"));
    }
    for path in paths {
        match path.as_str() {
            "rate_limit" => config.rate_limit = patch.rate_limit,
            "max_concurrent" => config.max_concurrent = patch.max_concurrent,
            other => {
                return Err(Invalid::new(
                    "update_mask",
                    format!("names {other:?}, which is not a field of BucketConfig"),
                ));
            }
        }
    }
    Ok(())
}

impl Broker {
    /// Reloads which queues take the gated lease for buckets and cooldowns
    /// (with the queue settings, `queues_reload`).
    ///
    /// What this replica noted itself is kept (a reload that read the rows just
    /// before its own write must not drop it): queues gated for a bucket stay so
    /// until restart, and for a cooldown until its end. Taking the gated lease
    /// longer than needed costs only time: that lease reads the rows themselves.
    pub(super) async fn limits_reload(&self) -> StoreResult<()> {
        let now = self.clock.now();
        let bucketed = self.store.bucket_queues().await?;
        let cooldowns = self.store.cooldown_list(now).await?;
        self.settings.limit_queues.update(|s| {
            s.bucketed.extend(bucketed.into_iter().map(|(_, q)| q));
            s.cooled.retain(|_, until| *until > now);
            for c in cooldowns {
                if let CooldownTarget::Key { queue, .. } = c.target {
                    let e = s.cooled.entry(queue).or_insert(c.until);
                    *e = (*e).max(c.until);
                }
            }
        });
        Ok(())
    }

    /// Submit: records that tasks of `queue` named `bucket` themselves, so the
    /// queue takes the gated lease (here at once, on the other replicas at
    /// their next reload).
    pub(super) async fn bucket_noted(&self, bucket: &str, queue: &str) -> StoreResult<()> {
        if self
            .settings
            .limit_queues
            .snapshot()
            .bucketed
            .contains(queue)
        {
            return Ok(());
        }
        self.store.bucket_queue_note(bucket, queue).await?;
        let q = queue.to_string();
        self.settings.limit_queues.update(|s| {
            s.bucketed.insert(q);
        });
        Ok(())
    }

    /// A schedule's template that names a bucket: as [`Broker::bucket_noted`].
    pub(super) async fn template_bucket_noted(
        &self,
        t: &crate::store::TaskTemplate,
    ) -> StoreResult<()> {
        match bucket::bucket_of(&t.metadata) {
            Some(b) => self.bucket_noted(b, &t.queue).await,
            None => Ok(()),
        }
    }

    /// The bucket a queue's settings give its tasks that name none.
    pub(super) fn queue_bucket(&self, queue: &str) -> Option<String> {
        self.settings.queue(queue).and_then(|l| l.config.bucket)
    }

    fn bucket_view(
        &self,
        b: StoredBucket,
        leased: u64,
        cooldowns: &[CooldownRecord],
    ) -> BucketView {
        let now = self.clock.now().timestamp_millis();
        let tokens = b
            .config
            .rate_limit
            .map_or(0.0, |l| l.refill(b.tokens, b.refilled_at_ms, now));
        let target = CooldownTarget::Bucket(b.name.clone());
        BucketView {
            cooldown_until: cooldowns
                .iter()
                .find(|c| c.target == target)
                .map(|c| c.until),
            name: b.name,
            config: b.config,
            tokens,
            leased,
            updated_at: b.updated_at,
        }
    }

    pub async fn get_bucket(&self, name: &str) -> Result<BucketView, ServiceError> {
        bucket::bucket_name("name", name)?;
        let Some(b) = self
            .store
            .bucket_list()
            .await?
            .into_iter()
            .find(|b| b.name == name)
        else {
            return Err(ServiceError::NotFound {
                what: "bucket",
                id: name.to_string(),
            });
        };
        let leased = self.store.bucket_leased(name).await?;
        let cooldowns = self.store.cooldown_list(self.clock.now()).await?;
        Ok(self.bucket_view(b, leased, &cooldowns))
    }

    pub async fn list_buckets(&self) -> Result<Vec<BucketView>, ServiceError> {
        let cooldowns = self.store.cooldown_list(self.clock.now()).await?;
        let mut out = Vec::new();
        for b in self.store.bucket_list().await? {
            let leased = self.store.bucket_leased(&b.name).await?;
            out.push(self.bucket_view(b, leased, &cooldowns));
        }
        Ok(out)
    }

    /// Changes the fields `paths` names, defining the bucket if need be.
    pub async fn update_bucket(
        &self,
        name: &str,
        patch: &BucketConfig,
        paths: &[String],
    ) -> Result<BucketView, ServiceError> {
        bucket::bucket_name("name", name)?;
        let current = self
            .store
            .bucket_list()
            .await?
            .into_iter()
            .find(|b| b.name == name);
        let mut config = current.map(|b| b.config).unwrap_or_default();
        apply_bucket_mask(&mut config, patch, paths)?;
        config.validate()?;
        self.store
            .bucket_put(&BucketPut {
                name: name.to_string(),
                config,
                now: self.clock.now(),
            })
            .await?;
        // Widened: waiting long-polls look again.
        self.dispatch.wake_n(None, usize::MAX);
        self.get_bucket(name).await
    }

    pub async fn delete_bucket(&self, name: &str) -> Result<(), ServiceError> {
        bucket::bucket_name("name", name)?;
        if !self.store.bucket_delete(name).await? {
            return Err(ServiceError::NotFound {
                what: "bucket",
                id: name.to_string(),
            });
        }
        self.dispatch.wake_n(None, usize::MAX);
        Ok(())
    }

    /// The live cooldowns, filtered by a queue's keys or a bucket.
    pub async fn list_cooldowns(
        &self,
        queue: &str,
        bucket_name: &str,
    ) -> Result<Vec<CooldownRecord>, ServiceError> {
        if !queue.is_empty() {
            validate::queue_name("queue", queue)?;
        }
        if !bucket_name.is_empty() {
            bucket::bucket_name("bucket", bucket_name)?;
        }
        let all = self.store.cooldown_list(self.clock.now()).await?;
        Ok(all
            .into_iter()
            .filter(|c| match &c.target {
                CooldownTarget::Key { queue: q, .. } => {
                    bucket_name.is_empty() && (queue.is_empty() || q == queue)
                }
                CooldownTarget::Bucket(b) => {
                    queue.is_empty() && (bucket_name.is_empty() || b == bucket_name)
                }
            })
            .collect())
    }

    /// Ends a live cooldown of a queue's key, or of a bucket; false when there
    /// was none.
    pub async fn lift_cooldown(
        &self,
        queue: &str,
        key: &str,
        bucket_name: &str,
    ) -> Result<bool, ServiceError> {
        let target = match (queue.is_empty(), key.is_empty(), bucket_name.is_empty()) {
            (false, false, true) => {
                validate::queue_name("queue", queue)?;
                crate::domain::admission::concurrency_key("concurrency_key", key)?;
                CooldownTarget::Key {
                    queue: queue.to_string(),
                    key: key.to_string(),
                }
            }
            (true, true, false) => {
                bucket::bucket_name("bucket", bucket_name)?;
                CooldownTarget::Bucket(bucket_name.to_string())
            }
            _ => {
                return Err(Invalid::new(
                    "bucket",
                    "name either a queue and a concurrency_key, or a bucket",
                )
                .into());
            }
        };
        let lifted = self.store.cooldown_lift(&target, self.clock.now()).await?;
        if lifted {
            match &target {
                CooldownTarget::Key { queue, .. } => self.dispatch.wake_n(Some(queue), usize::MAX),
                CooldownTarget::Bucket(_) => self.dispatch.wake_n(None, usize::MAX),
            }
        }
        Ok(lifted)
    }

    /// Fail: checks a cooldown against the leased task (its own key or bucket;
    /// the lease itself is checked by the fail that follows) and returns what it
    /// will hold.
    pub(super) async fn cooldown_target(
        &self,
        task_id: &str,
        lease_token: &str,
        ask: &CooldownAsk,
    ) -> Result<CooldownTarget, ServiceError> {
        ask.validate(self.settings.limits.max_cooldown)?;
        let task: Option<TaskRecord> = self.store.task_get(task_id).await?;
        // Only the holder of the lease learns anything of the task.
        let Some(task) = task.filter(|t| t.lease_token.as_deref() == Some(lease_token)) else {
            return Err(ServiceError::LeaseLost {
                task_id: task_id.to_string(),
            });
        };
        match ask.scope {
            CooldownScope::ConcurrencyKey => match task.concurrency_key {
                Some(key) => Ok(CooldownTarget::Key {
                    queue: task.queue,
                    key,
                }),
                None => {
                    Err(Invalid::new("cooldown.scope", "the task has no concurrency_key").into())
                }
            },
            CooldownScope::Bucket => match bucket::bucket_of(&task.metadata) {
                Some(b) => Ok(CooldownTarget::Bucket(b.to_string())),
                None => Err(Invalid::new("cooldown.scope", "the task has no bucket").into()),
            },
        }
    }

    /// Stores a cooldown a failed attempt asked for (after the fail committed).
    pub(super) async fn cooldown_set(
        &self,
        target: CooldownTarget,
        duration: Duration,
        task_id: &str,
        now: DateTime<Utc>,
    ) -> Result<(), ServiceError> {
        let until = now + chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX);
        let queue = match &target {
            CooldownTarget::Key { queue, .. } => Some(queue.clone()),
            CooldownTarget::Bucket(_) => None,
        };
        self.store
            .cooldown_put(&CooldownPut {
                target,
                until,
                task_id: task_id.to_string(),
                now,
            })
            .await?;
        if let Some(q) = queue {
            self.settings.limit_queues.update(|s| {
                let e = s.cooled.entry(q).or_insert(until);
                *e = (*e).max(until);
            });
        }
        Ok(())
    }

    /// What Explain needs of a task's bucket and its key's cooldown.
    pub(super) async fn limit_explain(
        &self,
        task: &TaskRecord,
        now: DateTime<Utc>,
    ) -> StoreResult<(Option<(String, BucketUse)>, Option<DateTime<Utc>>)> {
        let cooldowns = self.store.cooldown_list(now).await?;
        let key_until = task.concurrency_key.as_ref().and_then(|k| {
            let t = CooldownTarget::Key {
                queue: task.queue.clone(),
                key: k.clone(),
            };
            cooldowns.iter().find(|c| c.target == t).map(|c| c.until)
        });
        let Some(name) = bucket::bucket_of(&task.metadata) else {
            return Ok((None, key_until));
        };
        let target = CooldownTarget::Bucket(name.to_string());
        let cooldown_until = cooldowns
            .iter()
            .find(|c| c.target == target)
            .map(|c| c.until.timestamp_millis());
        let stored = self
            .store
            .bucket_list()
            .await?
            .into_iter()
            .find(|b| b.name == name);
        let use_ = match stored {
            Some(b) => BucketUse {
                tokens: b
                    .config
                    .rate_limit
                    .map(|l| l.refill(b.tokens, b.refilled_at_ms, now.timestamp_millis())),
                leased: self.store.bucket_leased(name).await?,
                cooldown_until,
                config: b.config,
            },
            None if cooldown_until.is_some() => BucketUse {
                cooldown_until,
                ..BucketUse::default()
            },
            None => return Ok((None, key_until)),
        };
        Ok((Some((name.to_string(), use_)), key_until))
    }
}
