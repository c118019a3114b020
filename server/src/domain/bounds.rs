//! What one Submit may make, counted after expansion: fan-out copies, the
//! dependency edges between copies, and the bytes every copy stores.
//!
//! A request names each spec once, but a spec with `fanout.copies = n` becomes n
//! tasks and an index naming it in `depends_on_index` becomes n edges for each
//! copy of the dependent. Every limit here applies to what the request expands
//! to, and is checked before anything is cloned, so the work and memory one call
//! can cause are bounded by these constants whatever its size on the wire
//! (docs/semantics.md, "Bounded work per Submit").

use super::validate::Invalid;

/// Tasks one Submit creates at most, fan-out copies counted.
pub const MAX_TASKS: u64 = 1000;
/// Dependencies one task has at most, after expansion (an index naming a
/// fan-out spec counts each of its copies).
pub const MAX_TASK_DEPENDENCIES: u64 = 1000;
/// Dependency edges one Submit writes at most, after expansion.
pub const MAX_EDGES: u64 = 10_000;
/// Bytes one Submit stores at most, after expansion: per task its queue, key,
/// payload, metadata, concurrency key, target (worker id and labels) and
/// dependency ids. Half the default request size: with the request itself, its
/// conversion and the database's encoding of it, one Submit stays under 100 MB
/// of broker memory (docs/performance.md).
pub const MAX_STORED_BYTES: u64 = 8 << 20;

/// One spec as the bounds see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecShape {
    /// Tasks this spec makes (its fan-out copies, else 1).
    pub copies: u32,
    /// Distinct task ids in `depends_on`.
    pub depends_on: usize,
    /// Distinct earlier indexes in `depends_on_index`, each below this spec's
    /// own index.
    pub depends_on_index: Vec<usize>,
    /// What one copy stores.
    pub bytes: u64,
}

/// What a request expands to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expansion {
    pub tasks: u64,
    pub edges: u64,
    pub bytes: u64,
}

/// Sorts and drops repeated entries, keeping the first position of each: the
/// same dependency named twice is one edge.
pub fn dedup<T: Ord + Clone>(v: &mut Vec<T>) {
    let mut seen = std::collections::BTreeSet::new();
    v.retain(|x| seen.insert(x.clone()));
}

/// Checks the expansion of `specs` against every limit, without building it.
/// `specs[i].depends_on_index` must hold only indexes below `i` (validated
/// before); a larger one is counted as a spec of one copy.
pub fn check(specs: &[SpecShape]) -> Result<Expansion, Invalid> {
    let copies = |k: usize| u64::from(specs.get(k).map_or(1, |s| s.copies.max(1)));
    let mut total = Expansion {
        tasks: 0,
        edges: 0,
        bytes: 0,
    };
    for (i, s) in specs.iter().enumerate() {
        let n = u64::from(s.copies.max(1));
        total.tasks = total.tasks.saturating_add(n);
        if total.tasks > MAX_TASKS {
            return Err(Invalid::new(
                "tasks",
                format!(
                    "would create more than {MAX_TASKS} tasks (fan-out copies included; \
                     tasks[{i}] passes the limit)"
                ),
            ));
        }
        let deps = s
            .depends_on_index
            .iter()
            .fold(s.depends_on as u64, |a, &k| a.saturating_add(copies(k)));
        if deps > MAX_TASK_DEPENDENCIES {
            return Err(Invalid::new(
                format!("tasks[{i}].depends_on_index"),
                format!(
                    "names {deps} tasks (fan-out copies included), more than \
                     {MAX_TASK_DEPENDENCIES}"
                ),
            ));
        }
        total.edges = total.edges.saturating_add(n.saturating_mul(deps));
        if total.edges > MAX_EDGES {
            return Err(Invalid::new(
                format!("tasks[{i}].depends_on_index"),
                format!(
                    "the request would write more than {MAX_EDGES} dependency edges \
                     (each copy of a fan-out task waits for every copy it names)"
                ),
            ));
        }
        total.bytes = total.bytes.saturating_add(n.saturating_mul(s.bytes));
        if total.bytes > MAX_STORED_BYTES {
            return Err(Invalid::too_large(
                format!("tasks[{i}]"),
                format!(
                    "the request would store more than {} MiB (fan-out copies included)",
                    MAX_STORED_BYTES >> 20
                ),
            ));
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(copies: u32, index: Vec<usize>, bytes: u64) -> SpecShape {
        SpecShape {
            copies,
            depends_on: 0,
            depends_on_index: index,
            bytes,
        }
    }

    #[test]
    fn dedup_keeps_the_first_of_each() {
        let mut v = vec![3, 0, 3, 1, 0, 0];
        dedup(&mut v);
        assert_eq!(v, vec![3, 0, 1]);
    }

    #[test]
    fn an_index_naming_a_fanout_spec_counts_its_copies() {
        // 500 copies each waiting for 500: 250,000 edges.
        let e = check(&[spec(500, vec![], 10), spec(500, vec![0], 10)]).unwrap_err();
        assert_eq!(e.field, "tasks[1].depends_on_index");
        assert!(e.message.contains("10000"), "{}", e.message);
        // One join waiting for 999 copies is fine.
        let ok = check(&[spec(999, vec![], 10), spec(1, vec![0], 10)]).unwrap();
        assert_eq!(
            ok,
            Expansion {
                tasks: 1000,
                edges: 999,
                bytes: 10_000
            }
        );
    }

    #[test]
    fn per_task_dependencies_count_after_expansion() {
        // 500 ids and an index naming 600 copies: 1,100 dependencies.
        let mut join = spec(1, vec![0], 1);
        join.depends_on = 500;
        let e = check(&[spec(600, vec![], 1), join.clone()]).unwrap_err();
        assert_eq!(e.field, "tasks[1].depends_on_index");
        assert!(e.message.contains("1100"), "{}", e.message);
        join.depends_on = 400;
        assert!(check(&[spec(600, vec![], 1), join]).is_ok());
    }

    #[test]
    fn tasks_and_bytes_count_copies() {
        assert_eq!(
            check(&[spec(1000, vec![], 1), spec(1, vec![], 1)])
                .unwrap_err()
                .field,
            "tasks"
        );
        let e = check(&[spec(9, vec![], 1 << 20)]).unwrap_err();
        assert!(e.too_large);
        assert_eq!(e.field, "tasks[0]");
        assert!(check(&[spec(8, vec![], 1 << 20)]).is_ok());
    }
}
