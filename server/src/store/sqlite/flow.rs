//! Flow on SQLite: the dependency reads, inserts with dependencies, and
//! resolving dependents.
//!
//! Every operation pushes the events of its transitions (`tx`).
//! [`after_job`] runs at the end of every write job (inside its savepoint): it
//! writes them, tells the dependents of each task that finished (one finished
//! task at a time, so a cancelled chain of any length is walked iteratively),
//! and files a dead-letter notice for each task that went DEAD in a queue that
//! has a dead-letter queue.

use std::cell::RefCell;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::super::flow::{
    dependency_failed, dependency_ids, finished_state, schedule_json, unblocked, with_flow,
};
use super::super::row::{from_ms, ms};
use super::super::*;
use super::{SqliteStore, events, key_waits, sql, tx};
use crate::domain::event::EventKind;

thread_local! {
    /// The writer thread's wake-up for queues that got pending tasks.
    static WAKER: RefCell<Option<Waker>> = const { RefCell::new(None) };
    /// Queues unblocked by the running batch, woken after it commits.
    static WOKEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Installs the wake-up on the writer thread (run as a write job).
pub(super) fn set_waker(wake: Waker) {
    WAKER.with(|w| *w.borrow_mut() = Some(wake));
}

/// Wakes `queue` after the running batch commits (it got pending tasks).
pub(super) fn wake(queue: String) {
    WOKEN.with(|w| w.borrow_mut().push(queue));
}

/// After a batch committed: wakes the queues whose tasks were unblocked.
pub(super) fn after_commit() {
    let queues = WOKEN.with(|w| std::mem::take(&mut *w.borrow_mut()));
    if queues.is_empty() {
        return;
    }
    WAKER.with(|w| {
        if let Some(wake) = w.borrow().as_ref() {
            for q in &queues {
                wake(Some(q));
            }
        }
    });
}

/// Writes the job's events, then tells the dependents of every task that
/// finished in this job and files dead-letter notices (whose events are written
/// in turn).
pub(super) fn after_job(c: &Connection) -> StoreResult<()> {
    loop {
        let evs = tx::take();
        if evs.is_empty() {
            return Ok(());
        }
        events::write(c, &evs)?;
        for e in &evs {
            let Some(state) = finished_state(e.kind) else {
                continue;
            };
            let waited_on = c
                .prepare_cached(sql::FLOW_RESOLVE_WAITED)?
                .exists([&e.task_id])?;
            if waited_on {
                resolve(c, &e.task_id, state, e.time)?;
            }
            if e.kind == EventKind::Dead {
                dead_letter(c, &e.task_id, &e.queue, e.time)?;
            }
        }
    }
}

/// A task went DEAD: a notice task on its queue's dead-letter queue, if it has one.
fn dead_letter(c: &Connection, id: &str, queue: &str, at: i64) -> StoreResult<()> {
    let dlq: Option<String> = c
        .prepare_cached(sql::FLOW_DEAD_LETTER_QUEUE)?
        .query_row([queue], |r| r.get(0))
        .optional()?;
    let Some(dlq) = dlq else {
        return Ok(());
    };
    let dead: (Option<String>, i64, Option<String>) = c
        .prepare_cached(sql::FLOW_DEAD_LETTER_TASK)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    let notice = super::super::events::dead_letter_notice(id, queue, &dlq, dead, at);
    super::rows::insert_many(c, std::slice::from_ref(&notice), from_ms(at))?;
    wake(dlq);
    Ok(())
}

/// One finished dependency: count it off its blocked dependents (the last one
/// unblocks), or cancel them when it failed and they do not run anyway.
fn resolve(c: &Connection, dep: &str, dep_state: &str, at: i64) -> StoreResult<()> {
    let dependents: Vec<(String, String, bool, String, i64)> = c
        .prepare_cached(sql::FLOW_RESOLVE_DEPENDENTS)?
        .query_map([dep], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    c.prepare_cached(sql::FLOW_RESOLVE_MARK)?.execute([dep])?;
    for (id, state, run_if, queue, attempt) in dependents {
        if state != "blocked" {
            continue;
        }
        if dep_state == "succeeded" || run_if {
            let now_pending: Option<(String, i64)> = c
                .prepare_cached(sql::FLOW_RESOLVE_COUNT)?
                .query_row(params![id, at], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some(("pending", run_at)) = now_pending.as_ref().map(|(s, r)| (s.as_str(), *r)) {
                tx::push(unblocked(&id, &queue, run_at, attempt, at));
                wake(queue);
            }
        } else {
            // Its own dependents are told when after_job reads its event in turn.
            let n = c
                .prepare_cached(sql::FLOW_RESOLVE_CANCEL)?
                .execute(params![id, at])?;
            if n > 0 {
                tx::push(dependency_failed(&id, &queue, attempt, at));
            }
        }
    }
    Ok(())
}

fn state_of(c: &Connection, id: &str) -> StoreResult<Option<String>> {
    Ok(c.prepare_cached(sql::FLOW_INSERT_STATE)?
        .query_row([id], |r| r.get(0))
        .optional()?)
}

/// Tasks::task_insert_flow's work, in the running write job: the tasks, then
/// their dependencies (by id, by index in the batch, by key) and the state
/// they make.
pub(super) fn insert(
    c: &Connection,
    tasks: &[NewTask],
    flows: &[FlowSpec],
    now: DateTime<Utc>,
    commit_by: Option<std::time::Instant>,
) -> StoreResult<FlowInserted> {
    // One writer: what is read here cannot change before the job ends. An
    // unknown dependency (or another producer's), a key with too many waits,
    // or a commit-by instant that passed, undoes the batch's inserts (its own
    // savepoint).
    c.execute_batch(sql::FLOW_INSERT_SAVEPOINT)?;
    let mark = tx::mark();
    let undo = || -> StoreResult<()> {
        c.execute_batch(sql::FLOW_INSERT_UNDO)?;
        tx::truncate(mark);
        Ok(())
    };
    let inserted = super::rows::insert_many(c, tasks, now)?;
    for (i, f) in flows.iter().enumerate() {
        for (j, d) in f.depends_on.iter().enumerate() {
            if !key_waits::may_name(c, d, f.producer.as_deref())? {
                undo()?;
                return Ok(FlowInserted::UnknownDependency { task: i, dep: j });
            }
        }
    }
    let now = ms(now);
    for (i, f, r) in with_flow(flows, &inserted) {
        let mut deps = dependency_ids(f, &inserted);
        // Keys: a key that names a task is a dependency on it; one that names
        // none yet is a wait the insert of a task with that key binds.
        let keys =
            match key_waits::key_deps(c, &r.task_id, &f.depends_on_keys, f.producer.as_deref())? {
                Ok(keys) => keys,
                Err(key) => {
                    undo()?;
                    return Ok(FlowInserted::TooManyWaits { task: i, key });
                }
            };
        deps.extend(keys.bound);
        deps.sort_unstable();
        deps.dedup();
        let mut remaining = keys.waiting;
        let mut failed = false;
        for d in &deps {
            let state = state_of(c, d)?.unwrap_or_default();
            let done = matches!(state.as_str(), "succeeded" | "dead" | "cancelled");
            remaining += i64::from(!done);
            failed |= matches!(state.as_str(), "dead" | "cancelled");
            c.prepare_cached(sql::TASK_INSERT_FLOW_EDGES)?
                .execute(params![d, r.task_id, done])?;
        }
        let state = super::super::flow::inserted_state(failed, f, remaining);
        let schedule = schedule_json(&f.retry_schedule);
        c.prepare_cached(sql::TASK_INSERT_FLOW_STATE)?
            .execute(params![
                r.task_id,
                state,
                remaining,
                f.run_if_dependency_fails,
                schedule,
                now
            ])?;
        if state == "blocked" {
            tx::submitted_blocked(&r.task_id);
        } else if state == "cancelled" {
            let t = &tasks[i];
            tx::push(dependency_failed(&r.task_id, &t.queue, 0, now));
        }
    }
    if commit_by.is_some_and(|d| std::time::Instant::now() >= d) {
        undo()?;
        return Ok(FlowInserted::DeadlinePassed);
    }
    c.execute_batch(sql::FLOW_INSERT_RELEASE)?;
    Ok(FlowInserted::Done(inserted))
}

super::super::flow::flow_reads!(SqliteStore, reader);
