//! The reply bound of a leased task ([`crate::domain::reply::task_bytes`]) as
//! SQL over the `tasks` row: the `size` every lease statement cuts its reply
//! by. Lengths are in bytes (`octet_length`, MySQL's `LENGTH`), never in
//! characters.

use crate::domain::reply::TASK_FIXED_BYTES;

/// The bytes of the variable fields of the `tasks` row in scope (columns
/// unqualified), metadata with its sixteenth (SQLite and Postgres syntax): the
/// bound less [`TASK_FIXED_BYTES`]. A literal, for statements built with
/// `concat!`.
macro_rules! size_of_fields {
    () => {
        "octet_length(id) + octet_length(queue) + COALESCE(octet_length(key), 0) \
         + octet_length(payload) + COALESCE(octet_length(checkpoint), 0) \
         + octet_length(metadata) + octet_length(metadata) / 16 \
         + COALESCE(octet_length(concurrency_key), 0) + COALESCE(octet_length(fanout_group), 0)"
    };
}
pub(crate) use size_of_fields;

/// The SQL dialect of a store.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
    Mysql,
}

/// The reply bound of the `tasks` row in scope (columns unqualified), an
/// integer expression.
pub(crate) fn size_sql(d: Dialect) -> String {
    let fields = match d {
        Dialect::Sqlite | Dialect::Postgres => size_of_fields!().to_string(),
        Dialect::Mysql => size_of_fields!()
            .replace("octet_length", "LENGTH")
            .replace("(key)", "(`key`)")
            .replace("/ 16", "DIV 16"),
    };
    format!("({fields} + {TASK_FIXED_BYTES})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_counts_bytes_quotes_key_and_divides_whole() {
        let sql = size_sql(Dialect::Mysql);
        assert!(!sql.contains("octet_length"), "{sql}");
        assert!(sql.contains("LENGTH(`key`)"), "{sql}");
        assert!(sql.contains("LENGTH(metadata) DIV 16"), "{sql}");
        assert!(sql.ends_with(&format!("+ {TASK_FIXED_BYTES})")), "{sql}");
    }
}
