//! Submit: validate a batch all-or-nothing, apply retry defaults, insert, wake waiters.

use std::time::Duration;

use super::submit_spec::stored_bytes;
pub use super::submit_spec::{DuplicateKey, RetrySpec, StickySpec, SubmitTask};
use super::{Broker, ServiceError};
use crate::domain::RetryPolicy;
use crate::domain::bounds;
use crate::domain::routing::{MAX_COPIES, TaskRouting};
use crate::domain::validate::{self, Invalid};
use crate::store::{Inserted, NewTask, Replacement};

/// The outcome of one submitted task (for a fan-out task, of its first copy;
/// `copy_task_ids` lists every copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub task_id: String,
    pub deduplicated: bool,
    pub copy_task_ids: Vec<String>,
    /// REPLACE_WAITING: the task holding the key waited and took this
    /// submission's payload, run_at, priority and metadata.
    pub replaced: bool,
}

/// The retry hint of a Submit refused by a full queue.
pub const PENDING_RETRY_AFTER: Duration = Duration::from_secs(1);

use crate::domain::task::DEPENDENCIES_KEY;
pub use crate::domain::task::PRODUCER_KEY;
pub use crate::domain::task::{AT_MOST_ONCE_KEY, is_at_most_once};

impl Broker {
    pub async fn submit(&self, tasks: Vec<SubmitTask>) -> Result<Vec<Submitted>, ServiceError> {
        self.submit_as(tasks, None).await
    }

    /// Submit on behalf of an authenticated producer: a key that another
    /// producer's task holds answers ALREADY_EXISTS, without that task's id.
    pub async fn submit_as(
        &self,
        tasks: Vec<SubmitTask>,
        producer: Option<&str>,
    ) -> Result<Vec<Submitted>, ServiceError> {
        self.submit_until(tasks, producer, None).await
    }

    /// Submit that commits only before `commit_by`: once it has passed, the
    /// call's writes roll back (or never start) and it answers
    /// DEADLINE_EXCEEDED, having stored nothing.
    pub async fn submit_until(
        &self,
        mut tasks: Vec<SubmitTask>,
        producer: Option<&str>,
        commit_by: Option<std::time::Instant>,
    ) -> Result<Vec<Submitted>, ServiceError> {
        let limits = &self.settings.limits;
        if tasks.is_empty() || tasks.len() > limits.max_submit_batch {
            return Err(Invalid::new(
                "tasks",
                format!("must hold 1 to {} tasks", limits.max_submit_batch),
            )
            .into());
        }
        let passed = || commit_by.is_some_and(|d| std::time::Instant::now() >= d);
        let now = self.clock.now();
        // Dependencies and retry schedules, validated per spec. The
        // same dependency named twice is one edge: repeats are dropped here,
        // before a fan-out spec's flow is cloned for each copy (`dep_pos[i][j]`
        // is where `depends_on[j]` stood in the request, for error fields).
        let mut flows: Vec<crate::store::FlowSpec> = Vec::with_capacity(tasks.len());
        let mut dep_pos: Vec<Vec<usize>> = Vec::with_capacity(tasks.len());
        let mut key_pos: Vec<Vec<usize>> = Vec::with_capacity(tasks.len());
        for (i, t) in tasks.iter_mut().enumerate() {
            super::flow::validate_flow(i, &t.flow, limits.max_backoff)?;
            let mut f = std::mem::take(&mut t.flow);
            let mut seen = std::collections::HashSet::new();
            let (ids, pos): (Vec<String>, Vec<usize>) = f
                .depends_on
                .drain(..)
                .enumerate()
                .filter(|(_, d)| seen.insert(d.clone()))
                .map(|(j, d)| (d, j))
                .unzip();
            f.depends_on = ids;
            bounds::dedup(&mut f.depends_on_index);
            let mut seen_keys = std::collections::HashSet::new();
            let (keys, kpos): (Vec<crate::store::TaskKey>, Vec<usize>) = f
                .depends_on_keys
                .drain(..)
                .enumerate()
                .filter(|(_, k)| seen_keys.insert(k.clone()))
                .map(|(j, k)| (k, j))
                .unzip();
            f.depends_on_keys = keys;
            // A task cannot wait for its own key.
            if let (Some(key), Some(j)) = (
                t.key.as_deref(),
                f.depends_on_keys
                    .iter()
                    .position(|k| Some(k.key.as_str()) == t.key.as_deref() && k.queue == t.queue),
            ) {
                return Err(Invalid::new(
                    format!("tasks[{i}].depends_on_keys[{}]", kpos[j]),
                    format!("names this task's own key {key} in queue {}", t.queue),
                )
                .into());
            }
            // Dependencies bind only to the caller's own tasks.
            f.producer = producer.map(str::to_string);
            flows.push(f);
            dep_pos.push(pos);
            key_pos.push(kpos);
        }
        // A fan-out task becomes its copies; `copies[i]` is
        // how many tasks the i-th spec made. Every limit applies to what the
        // request expands to, checked before anything is cloned.
        let shapes: Vec<bounds::SpecShape> = tasks
            .iter()
            .zip(&flows)
            .map(|(t, f)| bounds::SpecShape {
                // (A spec with a bad count is refused below, naming its field.)
                copies: match t.fanout {
                    Some(fo) if (1..=MAX_COPIES).contains(&fo.copies) => fo.copies,
                    _ => 1,
                },
                depends_on: f.depends_on.len() + f.depends_on_keys.len(),
                depends_on_index: f.depends_on_index.clone(),
                bytes: stored_bytes(t, f),
            })
            .collect();
        bounds::check(&shapes)?;
        drop(shapes);
        let mut copies = Vec::with_capacity(tasks.len());
        let mut new = Vec::with_capacity(tasks.len());
        // Where each spec's first task is in `new`.
        let mut first_of = Vec::with_capacity(tasks.len());
        // REPLACE_WAITING: (spec, what it writes over a waiting duplicate).
        let mut replacing: Vec<(usize, Replacement)> = Vec::new();
        // Limit buckets the tasks name themselves, by queue (checked below).
        let mut own_buckets: Vec<(String, String)> = tasks
            .iter()
            .filter_map(|t| t.bucket.clone().map(|b| (b, t.queue.clone())))
            .collect();
        own_buckets.sort_unstable();
        own_buckets.dedup();
        for (i, t) in tasks.into_iter().enumerate() {
            let policy = t.on_duplicate;
            let made = self.new_copies(i, t, now)?;
            if policy == DuplicateKey::ReplaceWaiting {
                replacing.push((i, replacement(&made[0])));
            }
            copies.push(made.len());
            first_of.push(new.len());
            new.extend(made);
        }
        // Flow per task: a fan-out spec's copies share its flow, and an
        // index naming a fan-out spec waits for every one of its copies.
        let mut spec_of = Vec::with_capacity(new.len());
        let mut task_flows = Vec::with_capacity(new.len());
        for (i, mut f) in flows.into_iter().enumerate() {
            f.depends_on_index = f
                .depends_on_index
                .iter()
                .flat_map(|&k| first_of[k]..first_of[k] + copies[k])
                .collect();
            for _ in 0..copies[i] {
                spec_of.push(i);
                task_flows.push(f.clone());
            }
        }
        // A task with dependencies is marked so: a lease reads the results of
        // the dependencies of marked tasks only.
        for (t, f) in new.iter_mut().zip(&task_flows) {
            if f.has_dependencies() {
                t.metadata.insert(DEPENDENCIES_KEY.into(), "true".into());
            }
        }
        // (index, queue, key) of the keyed tasks, when a producer submits. (A
        // keyed task has no copies: its spec's first task is the task.)
        let keyed: Vec<(usize, String, String)> = match producer {
            Some(_) => first_of
                .iter()
                .enumerate()
                .filter_map(|(i, &at)| {
                    let t = &new[at];
                    t.key.clone().map(|k| (i, t.queue.clone(), k))
                })
                .collect(),
            None => Vec::new(),
        };
        if let Some(producer) = producer {
            self.check_key_owners(&keyed, producer).await?;
        }
        self.check_pending(&new).await?;
        // Their queues take the gated lease, which applies the buckets.
        for (b, q) in &own_buckets {
            self.bucket_noted(b, q).await?;
        }
        if passed() {
            return Err(ServiceError::DeadlineExceeded);
        }
        let queues: Vec<String> = new.iter().map(|t| t.queue.clone()).collect();
        let routed: Vec<bool> = new
            .iter()
            .map(|t| t.routing != TaskRouting::default())
            .collect();
        // Concurrent Submit calls share one insert statement and commit, which
        // hands tasks to waiting long-polls (sync match).
        let matchable = self.sync_matchable(&new);
        let parked = self.parked.clone();
        let release = self.releaser();
        let weight = new.len();
        // Flow: tasks with dependencies or flow options take the flow insert
        // (never sync-matched: a blocked task is not ready to lease).
        let (inserted, matched): (Vec<Inserted>, Vec<bool>) =
            if task_flows.iter().any(|f| !f.is_plain()) {
                let inserted = self
                    .insert_flow(
                        new,
                        task_flows,
                        now,
                        &spec_of,
                        [&dep_pos, &key_pos],
                        commit_by,
                    )
                    .await?;
                let n = inserted.len();
                (inserted, vec![false; n])
            } else {
                let asked = new.len();
                let answers: Vec<(Inserted, bool)> = self
                    .submits
                    .call(
                        (),
                        (new, matchable, now, commit_by),
                        weight,
                        move |batch: Vec<super::sync_match::SubmitBatch>| {
                            let (parked, release) = (parked.clone(), release.clone());
                            async move {
                                super::sync_match::insert_batch(&parked, &release, batch).await
                            }
                        },
                    )
                    .await?;
                // A call whose commit-by instant passed before its batch
                // started was left out of it.
                if answers.len() != asked {
                    return Err(ServiceError::DeadlineExceeded);
                }
                answers.into_iter().unzip()
            };
        // A key taken by another producer between the check and the insert (a race
        // of two producers on one key) is refused the same way; the call's other
        // tasks stand, as their own keys make a retry safe.
        if let Some(producer) = producer {
            let raced: Vec<(usize, String, String)> = keyed
                .into_iter()
                .filter(|(i, _, _)| {
                    first_of
                        .get(*i)
                        .and_then(|&at| inserted.get(at))
                        .is_some_and(|r| r.deduplicated)
                })
                .collect();
            self.check_key_owners(&raced, producer).await?;
        }
        // REPLACE_WAITING: a spec whose key was taken writes over the task
        // holding it while that task waits, in request order (the last of
        // several specs with one key wins). One extra statement per such spec,
        // after the insert: the default path is unchanged.
        let mut replaced = vec![false; copies.len()];
        for (i, r) in replacing {
            let deduplicated = inserted.get(first_of[i]).is_some_and(|r| r.deduplicated);
            if !deduplicated {
                continue;
            }
            if self.store.task_replace_waiting(&r, now).await?.is_some() {
                replaced[i] = true;
                self.dispatch.wake_n(Some(&r.queue), 1);
            }
        }
        // Wake one waiting long-poll per new task in each queue (every waiter
        // for a routed task: the one that may take it must be among them).
        let mut new_per_queue: Vec<(&str, usize)> = Vec::new();
        for (((queue, r), routed), matched) in
            queues.iter().zip(&inserted).zip(&routed).zip(matched)
        {
            if r.deduplicated {
                continue;
            }
            self.metrics.submitted(queue);
            if matched {
                // Leased already, to a long-poll that has it in hand.
                continue;
            }
            let n = if *routed { 256 } else { 1 };
            match new_per_queue.iter_mut().find(|(q, _)| q == queue) {
                Some((_, m)) => *m += n,
                None => new_per_queue.push((queue, n)),
            }
        }
        for (q, n) in new_per_queue {
            self.dispatch.wake_n(Some(q), n);
        }
        // One result per spec: a fan-out spec's copies fold into one.
        let mut inserted = inserted.into_iter();
        Ok(copies
            .into_iter()
            .zip(replaced)
            .map(|(n, replaced)| {
                let made: Vec<Inserted> = inserted.by_ref().take(n).collect();
                let first = made.first();
                Submitted {
                    task_id: first.map(|r| r.task_id.clone()).unwrap_or_default(),
                    deduplicated: first.is_some_and(|r| r.deduplicated),
                    copy_task_ids: if n > 1 {
                        made.iter().map(|r| r.task_id.clone()).collect()
                    } else {
                        Vec::new()
                    },
                    replaced,
                }
            })
            .collect())
    }

    /// Refuses keys that another producer's tasks hold.
    async fn check_key_owners(
        &self,
        keyed: &[(usize, String, String)],
        producer: &str,
    ) -> Result<(), ServiceError> {
        if keyed.is_empty() {
            return Ok(());
        }
        let keys: Vec<(String, String)> = keyed
            .iter()
            .map(|(_, q, k)| (q.clone(), k.clone()))
            .collect();
        let holders = self.store.task_find_keys(&keys).await?;
        for (i, queue, key) in keyed {
            let foreign = holders.iter().any(|h| {
                &h.queue == queue
                    && h.key.as_ref() == Some(key)
                    && h.metadata.get(PRODUCER_KEY).map(String::as_str) != Some(producer)
            });
            if foreign {
                return Err(ServiceError::AlreadyExists {
                    field: format!("tasks[{i}].key"),
                    message: format!("another producer's task holds this key in queue {queue}"),
                });
            }
        }
        Ok(())
    }

    pub(super) fn retry_policy(
        &self,
        queue: &str,
        spec: &RetrySpec,
        f: &dyn Fn(&str) -> String,
    ) -> Result<RetryPolicy, Invalid> {
        let limits = &self.settings.limits;
        let d = self.settings.retry_for(queue);
        let max_attempts = spec.max_attempts.unwrap_or(d.max_attempts);
        if max_attempts == 0 || max_attempts > limits.max_attempts {
            return Err(Invalid::new(
                f("retry.max_attempts"),
                format!("must be between 1 and {}", limits.max_attempts),
            ));
        }
        let multiplier = spec.backoff_multiplier.unwrap_or(d.backoff_multiplier);
        if !(1.0..=100.0).contains(&multiplier) {
            return Err(Invalid::new(
                f("retry.backoff_multiplier"),
                "must be between 1 and 100",
            ));
        }
        let jitter = spec.jitter.unwrap_or(d.jitter);
        if !(0.0..=1.0).contains(&jitter) {
            return Err(Invalid::new(f("retry.jitter"), "must be between 0 and 1"));
        }
        let initial_backoff = spec.initial_backoff.unwrap_or(d.initial_backoff);
        let max_backoff = spec.max_backoff.unwrap_or(d.max_backoff);
        for (name, v) in [
            ("initial_backoff", initial_backoff),
            ("max_backoff", max_backoff),
        ] {
            validate::duration_in(
                &f(&format!("retry.{name}")),
                v,
                Duration::ZERO,
                limits.max_backoff,
            )?;
        }
        Ok(RetryPolicy {
            max_attempts,
            initial_backoff,
            backoff_multiplier: multiplier,
            max_backoff,
            jitter,
        })
    }
}

/// What a REPLACE_WAITING spec writes over the waiting task holding its key.
fn replacement(t: &NewTask) -> Replacement {
    Replacement {
        queue: t.queue.clone(),
        key: t.key.clone().unwrap_or_default(),
        payload: t.payload.clone(),
        run_at: t.run_at,
        priority: t.priority,
        metadata: t.metadata.clone(),
    }
}
