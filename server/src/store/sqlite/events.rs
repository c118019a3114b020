//! Flow: recording task events on SQLite.
//!
//! The operations of a write job push the events of their transitions here (the
//! writer thread's buffer); at the end of the job, inside its savepoint,
//! [`super::flow::after_job`] writes them with multi-row INSERTs, so they commit
//! (or roll back) with the job. One writer commits in order, so the rowid is the
//! cursor. No trigger runs on `tasks`.

use std::cell::RefCell;

use rusqlite::{Connection, ToSql, params_from_iter};

use super::super::StoreResult;
use super::super::flow::Ev;
use crate::domain::event::EventKind;

/// An event waiting for the end of its job.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub task_id: String,
    pub queue: String,
    pub kind: EventKind,
    pub state: &'static str,
    pub attempt: i64,
    pub worker: Option<String>,
    pub time: i64,
    pub detail: Option<String>,
}

thread_local! {
    /// The running job's events (the writer thread runs one job at a time).
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
}

/// Buffers an event of the running job.
pub(super) fn push(e: Ev<'_>) {
    PENDING.with(|p| {
        p.borrow_mut().push(Pending {
            task_id: e.task_id.to_owned(),
            queue: e.queue.to_owned(),
            kind: e.kind,
            state: e.state,
            attempt: e.attempt,
            worker: e.worker.map(str::to_owned),
            time: e.time,
            detail: e.detail.map(str::to_owned),
        })
    });
}

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

/// Rows per INSERT statement: a batch is written in pieces of these sizes, so
/// four prepared statements serve every batch (8 values a row, well under
/// SQLite's limit of 32,766).
const PIECES: [usize; 4] = [64, 16, 4, 1];

/// Writes events in order.
pub(super) fn write(c: &Connection, evs: &[Pending]) -> StoreResult<()> {
    let mut rest = evs;
    while !rest.is_empty() {
        let n = PIECES.into_iter().find(|&n| n <= rest.len()).unwrap_or(1);
        let (piece, tail) = rest.split_at(n);
        rest = tail;
        let kinds: Vec<&'static str> = piece.iter().map(|e| e.kind.as_str()).collect();
        let mut args: Vec<&dyn ToSql> = Vec::with_capacity(n * 8);
        for (e, kind) in piece.iter().zip(&kinds) {
            args.push(&e.task_id);
            args.push(&e.queue);
            args.push(kind);
            args.push(&e.state);
            args.push(&e.attempt);
            args.push(&e.worker);
            args.push(&e.time);
            args.push(&e.detail);
        }
        c.prepare_cached(insert_sql_cached(n))?
            .execute(params_from_iter(args))?;
    }
    Ok(())
}

/// The INSERT of `rows` events, built once per piece size (not a new
/// string per job just to look the prepared statement up).
fn insert_sql_cached(rows: usize) -> &'static str {
    static SQL: std::sync::OnceLock<[String; 4]> = std::sync::OnceLock::new();
    let all = SQL.get_or_init(|| PIECES.map(insert_sql));
    match PIECES.iter().position(|&n| n == rows) {
        Some(i) => &all[i],
        None => all[PIECES.len() - 1].as_str(),
    }
}

fn insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO task_events (task_id, queue, kind, state, attempt, worker_id, time, detail) \
         VALUES ",
    );
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str("(?, ?, ?, ?, ?, ?, ?, ?)");
    }
    sql
}

/// How many events the running job has pushed so far (for [`truncate`]).
pub(super) fn mark() -> usize {
    PENDING.with(|p| p.borrow().len())
}

/// Drops the events pushed since `mark` (their savepoint was rolled back).
pub(super) fn truncate(mark: usize) {
    PENDING.with(|p| p.borrow_mut().truncate(mark));
}
