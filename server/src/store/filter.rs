//! The filters of a task list and of a bulk selection as SQL terms, written
//! once for every database: each backend's statement head names the table and
//! its own order and limit follow; [`Dialect`] holds the few words the
//! databases spell differently. The placeholders are the builder's own (`?` or
//! `$n`), so every value is bound, never written into the text.

use sqlx::{Database, Encode, QueryBuilder, Type};

use super::row::{ms, state_filter_sql};
use super::{BulkFilter, TaskFilter};

/// What a database spells its own way in the filters.
pub(crate) struct Dialect {
    /// The `key` column (MySQL reserves the word: it is quoted there).
    pub key: &'static str,
    /// Whether the page bound `(created_at, seq) < (a, s)` is written as a row
    /// comparison (read from the creation index), else as
    /// `created_at < a OR (created_at = a AND seq < s)`.
    pub row_compare: bool,
    /// The key-prefix test, around the bound prefix: `[before, between]`, so
    /// the SQL reads `before ? between ?`.
    pub key_prefix: [&'static str; 2],
    /// The error-text test, around the bound text: `[before, after]`.
    pub error_contains: [&'static str; 2],
    /// One entry of a JSON object column as text: `[before the column, between
    /// the column and the bound key, after it]`.
    pub json_text: [&'static str; 3],
    /// Whether a JSON object column has an entry: the same three pieces.
    pub json_has: [&'static str; 3],
    /// Whether the key is bound as a JSON path (`$."key"`), else as the key itself.
    pub json_path: bool,
}

pub(crate) const SQLITE: Dialect = Dialect {
    key: "key",
    row_compare: true,
    key_prefix: [" AND substr(key, 1, length(", ")) = "],
    error_contains: [" AND instr(COALESCE(last_error, ''), ", ") > 0"],
    json_text: [" AND json_extract(", ", ", ")"],
    json_has: [" AND json_type(", ", ", ") IS NOT NULL"],
    json_path: true,
};

pub(crate) const POSTGRES: Dialect = Dialect {
    key: "key",
    row_compare: true,
    key_prefix: [" AND left(key, length(", ")) = "],
    error_contains: [" AND strpos(COALESCE(last_error, ''), ", ") > 0"],
    json_text: [" AND (", "::jsonb ->> ", ")"],
    json_has: [" AND jsonb_exists(", "::jsonb, ", ")"],
    json_path: false,
};

pub(crate) const MYSQL: Dialect = Dialect {
    key: "`key`",
    row_compare: false,
    key_prefix: [" AND LEFT(`key`, CHAR_LENGTH(", ")) = "],
    error_contains: [" AND INSTR(COALESCE(last_error, ''), ", ") > 0"],
    json_text: [" AND JSON_UNQUOTE(JSON_EXTRACT(", ", ", "))"],
    json_has: [" AND JSON_CONTAINS_PATH(", ", 'one', ", ") = 1"],
    json_path: true,
};

/// Pushes ` AND ...` for each filter of a task list that is given, the page
/// bound (newest created first: below the last row of the page before; a page
/// token of an earlier version carries only a sequence number) and the states.
pub(crate) fn push_task_terms<DB>(qb: &mut QueryBuilder<DB>, d: &Dialect, f: &TaskFilter)
where
    DB: Database,
    String: for<'t> Encode<'t, DB> + Type<DB>,
    i64: for<'t> Encode<'t, DB> + Type<DB>,
{
    if let Some(queue) = &f.queue {
        qb.push(" AND queue = ").push_bind(queue);
    }
    if let Some(key) = &f.key {
        qb.push(" AND ").push(d.key).push(" = ").push_bind(key);
    }
    if let Some(worker) = &f.worker_id {
        qb.push(" AND leased_by = ").push_bind(worker);
    }
    if let Some(error) = &f.last_error {
        qb.push(" AND last_error = ").push_bind(error);
    }
    push_created(qb, f.created_after, f.created_before);
    if let Some(schedule) = &f.schedule_id {
        qb.push(" AND schedule_id = ").push_bind(schedule);
    }
    match (f.before_created, f.before_seq) {
        (Some(at), Some(seq)) if d.row_compare => {
            qb.push(" AND (created_at, seq) < (")
                .push_bind(ms(at))
                .push(", ")
                .push_bind(seq)
                .push(")");
        }
        (Some(at), Some(seq)) => {
            qb.push(" AND (created_at < ")
                .push_bind(ms(at))
                .push(" OR (created_at = ")
                .push_bind(ms(at))
                .push(" AND seq < ")
                .push_bind(seq)
                .push("))");
        }
        (_, Some(seq)) => {
            qb.push(" AND seq < ").push_bind(seq);
        }
        _ => {}
    }
    if let Some(group) = &f.fanout_group {
        qb.push(" AND fanout_group = ").push_bind(group);
    }
    if let Some(worker) = &f.target_worker {
        qb.push(" AND target_worker = ").push_bind(worker.clone());
    }
    for (k, v) in &f.target_labels {
        push_json_eq(qb, d, "target_labels", k, v);
    }
    match &f.metadata {
        Some((k, Some(v))) => push_json_eq(qb, d, "metadata", k, v),
        Some((k, None)) => {
            qb.push(d.json_has[0])
                .push("metadata")
                .push(d.json_has[1])
                .push_bind(json_key(d, k))
                .push(d.json_has[2]);
        }
        None => {}
    }
    push_states(qb, &f.states, f.now);
}

/// The key as the dialect binds it: a JSON path label (the service refuses keys
/// holding `"` or `\`, so quoting is enough) or the key itself.
fn json_key(d: &Dialect, k: &str) -> String {
    if d.json_path {
        format!("$.\"{k}\"")
    } else {
        k.to_string()
    }
}

/// ` AND <column>[k] = v` for a JSON object column.
fn push_json_eq<DB>(qb: &mut QueryBuilder<DB>, d: &Dialect, column: &str, k: &str, v: &str)
where
    DB: Database,
    String: for<'t> Encode<'t, DB> + Type<DB>,
{
    qb.push(d.json_text[0])
        .push(column)
        .push(d.json_text[1])
        .push_bind(json_key(d, k))
        .push(d.json_text[2])
        .push(" = ")
        .push_bind(v.to_string());
}

/// Pushes ` AND ...` for each filter of a bulk selection that is given, after
/// the queue (which the statement head binds).
pub(crate) fn push_select_terms<DB>(qb: &mut QueryBuilder<DB>, d: &Dialect, f: &BulkFilter)
where
    DB: Database,
    String: for<'t> Encode<'t, DB> + Type<DB>,
    i64: for<'t> Encode<'t, DB> + Type<DB>,
{
    if let Some(p) = &f.key_prefix {
        qb.push(d.key_prefix[0])
            .push_bind(p)
            .push(d.key_prefix[1])
            .push_bind(p);
    }
    if let Some(e) = &f.error_contains {
        qb.push(d.error_contains[0])
            .push_bind(e)
            .push(d.error_contains[1]);
    }
    push_created(qb, f.created_after, f.created_before);
    if let Some(s) = &f.schedule_id {
        qb.push(" AND schedule_id = ").push_bind(s);
    }
    push_states(qb, &f.states, f.now);
}

fn push_created<DB>(
    qb: &mut QueryBuilder<DB>,
    after: Option<chrono::DateTime<chrono::Utc>>,
    before: Option<chrono::DateTime<chrono::Utc>>,
) where
    DB: Database,
    i64: for<'t> Encode<'t, DB> + Type<DB>,
{
    if let Some(t) = after {
        qb.push(" AND created_at >= ").push_bind(ms(t));
    }
    if let Some(t) = before {
        qb.push(" AND created_at < ").push_bind(ms(t));
    }
}

/// The visible states asked for (`now` written as a number: it is the
/// caller's clock, not user input).
fn push_states<DB: Database>(
    qb: &mut QueryBuilder<DB>,
    states: &[crate::domain::TaskState],
    now: chrono::DateTime<chrono::Utc>,
) {
    if let Some(sql) = state_filter_sql(states, &ms(now).to_string()) {
        qb.push(" AND ").push(sql);
    }
}
