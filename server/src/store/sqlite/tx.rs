//! How a write runs on SQLite, and how it records its events.
//!
//! A write is one job handed to the writer thread (`native::writer`): it runs
//! on the one write connection inside the writer's batch transaction (in a
//! savepoint of its own when the batch holds others), and its caller gets its
//! answer once the batch committed. Every write method of the store runs
//! through [`SqliteStore::write`]; there is no other way to write.
//!
//! The events of its transitions are buffered as it goes (the writer thread's
//! buffer, [`push`]) and written at its end, inside its savepoint, by
//! [`super::flow::after_job`] (`events::write`), so they commit or roll back
//! with the write. One writer commits in order, so the rowid is the event
//! cursor; no trigger runs on `tasks`.

use std::cell::RefCell;

use super::super::flow::Ev;
use crate::domain::event::EventKind;

pub(super) use super::super::flow::Pending;

thread_local! {
    /// The running job's events (the writer thread runs one job at a time).
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
}

/// Buffers an event of the running job.
pub(super) fn push(e: Ev<'_>) {
    PENDING.with(|p| p.borrow_mut().push(Pending::from(e)));
}

pub(super) use super::super::flow::simple;

/// Flow: a task inserted with dependencies was submitted BLOCKED.
pub(super) fn submitted_blocked(task_id: &str) {
    PENDING.with(|p| {
        for e in p.borrow_mut().iter_mut() {
            if e.kind == EventKind::Submitted && e.task_id == task_id {
                e.state = "blocked";
            }
        }
    });
}

/// The running job's events so far (the buffer is emptied).
pub(super) fn take() -> Vec<Pending> {
    PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

/// Drops the events of a job that failed (its savepoint is rolled back).
pub(super) fn discard() {
    PENDING.with(|p| p.borrow_mut().clear());
}

/// How many events the running job has pushed so far (for [`truncate`]).
pub(super) fn mark() -> usize {
    PENDING.with(|p| p.borrow().len())
}

/// Drops the events pushed since `mark` (their savepoint was rolled back).
pub(super) fn truncate(mark: usize) {
    PENDING.with(|p| p.borrow_mut().truncate(mark));
}
