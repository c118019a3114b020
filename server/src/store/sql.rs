//! The store's statements, as the build reads them from each backend's `.sql`
//! files (`server/store_sql.rs` says how a file is written). Each backend
//! includes its constants as `<backend>::sql`.

/// One named statement of a backend, as it runs (fragments expanded).
#[derive(Debug, Clone, Copy)]
pub struct Statement {
    pub name: &'static str,
    /// The file it is written in, inside the backend's folder.
    pub file: &'static str,
    /// Why only this backend has it, when that is so.
    pub own: Option<&'static str>,
    /// A part that the code joins with others at run time (a `VALUES` row
    /// repeated per batch row), not a statement to prepare alone.
    pub piece: bool,
    pub text: &'static str,
}

/// Every statement of a backend ("sqlite", "postgres", "mysql"), in file order.
pub fn statements(backend: &str) -> Option<&'static [Statement]> {
    match backend {
        "sqlite" => Some(super::sqlite::sql::STATEMENTS),
        "postgres" => Some(super::postgres::sql::STATEMENTS),
        "mysql" => Some(super::mysql::sql::STATEMENTS),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKENDS: [&str; 3] = ["sqlite", "postgres", "mysql"];

    /// A statement one backend has is in every backend, under the same name and
    /// in the same file, unless it says (`-- own:`) why only that backend needs it.
    #[test]
    fn every_backend_has_the_same_statements() {
        let mut missing = Vec::new();
        for a in BACKENDS {
            for s in statements(a).unwrap() {
                if s.own.is_some() {
                    continue;
                }
                for b in BACKENDS {
                    let found = statements(b).unwrap().iter().find(|t| t.name == s.name);
                    match found {
                        None => missing.push(format!("{} ({a}/{}) is not in {b}", s.name, s.file)),
                        Some(t) if t.file != s.file => missing.push(format!(
                            "{} is in {a}/{} but {b}/{}",
                            s.name, s.file, t.file
                        )),
                        Some(_) => {}
                    }
                }
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    #[test]
    fn statements_are_expanded_and_not_empty() {
        for b in BACKENDS {
            for s in statements(b).unwrap() {
                assert!(!s.text.trim().is_empty(), "{b}: {}", s.name);
                assert!(!s.text.contains("${"), "{b}: {} keeps a fragment", s.name);
            }
        }
    }
}
