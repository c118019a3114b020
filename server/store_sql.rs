//! Turns the store's `.sql` files into named constants, one file of constants per
//! backend (`$OUT_DIR/store_sql_<backend>.rs`, included by `store/<backend>/mod.rs`).
//!
//! A file holds blocks; each starts with a marker line and runs to the next one:
//!
//! ```sql
//! -- name: lease_next
//! -- own: why only this database has it (optional, right after the name)
//! -- Lines of comment before the statement become its doc comment.
//! SELECT ... ${lease_order} ...
//!
//! -- fragment: lease_order
//! priority DESC, deadline_at, run_at, id
//! ```
//!
//! A `-- piece:` block is a statement's part that the code joins with others at
//! run time (a `VALUES` row repeated as often as the batch has rows): a constant
//! like a statement's, listed with `piece: true`, and not a statement a database
//! can prepare alone.
//!
//! `${name}` stands for the fragment of that name, of the same backend, expanded
//! where it stands (fragments may name fragments). A statement's name becomes a
//! constant in upper case; `STATEMENTS` lists every statement with its file, its
//! `own` reason and its text, for the test that holds the backends to the same
//! set of names and for `taskbroker sql`, which prints a statement as it runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const BACKENDS: [&str; 3] = ["sqlite", "postgres", "mysql"];

struct Block {
    name: String,
    piece: bool,
    file: String,
    own: Option<String>,
    doc: Vec<String>,
    text: String,
}

type Error = Box<dyn std::error::Error>;

pub fn generate() -> Result<(), Error> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    for backend in BACKENDS {
        let dir = Path::new("src/store").join(backend);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files = Vec::new();
        sql_files(&dir, &mut files)?;
        files.sort();
        let mut statements = Vec::new();
        let mut fragments = BTreeMap::new();
        for path in &files {
            println!("cargo:rerun-if-changed={}", path.display());
            let rel = path.strip_prefix(&dir)?.display().to_string();
            let text = std::fs::read_to_string(path)?;
            for (kind, block) in blocks(&rel, &text)? {
                if kind == "fragment" {
                    if fragments.insert(block.name.clone(), block.text).is_some() {
                        return Err(
                            format!("{backend}/{rel}: fragment {} twice", block.name).into()
                        );
                    }
                } else {
                    statements.push(block);
                }
            }
        }
        let mut code = String::new();
        let mut seen = BTreeMap::new();
        for s in &statements {
            if let Some(other) = seen.insert(s.name.clone(), s.file.clone()) {
                return Err(
                    format!("{backend}: statement {} in {other} and {}", s.name, s.file).into(),
                );
            }
            let text = expand(&s.text, &fragments, &mut Vec::new())
                .map_err(|e| format!("{backend}/{}: {}: {e}", s.file, s.name))?;
            writeln!(code, "/// `{}` (`{}`).", s.name, s.file)?;
            if !s.doc.is_empty() {
                writeln!(code, "///")?;
            }
            for d in &s.doc {
                writeln!(code, "/// {d}")?;
            }
            writeln!(code, "#[allow(dead_code)]")?;
            writeln!(
                code,
                "pub(crate) const {}: &str = {:?};",
                s.name.to_uppercase(),
                text
            )?;
        }
        writeln!(code, "/// Every statement of this backend, in file order.")?;
        writeln!(
            code,
            "pub(crate) static STATEMENTS: &[crate::store::sql::Statement] = &["
        )?;
        for s in &statements {
            writeln!(
                code,
                "    crate::store::sql::Statement {{ name: {:?}, file: {:?}, own: {:?}, piece: {}, text: {} }},",
                s.name,
                s.file,
                s.own,
                s.piece,
                s.name.to_uppercase()
            )?;
        }
        writeln!(code, "];")?;
        std::fs::write(out.join(format!("store_sql_{backend}.rs")), code)?;
    }
    Ok(())
}

fn sql_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    if !dir.exists() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            sql_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "sql") {
            out.push(path);
        }
    }
    Ok(())
}

fn blocks(file: &str, text: &str) -> Result<Vec<(&'static str, Block)>, Error> {
    let mut out: Vec<(&'static str, Block)> = Vec::new();
    let mut body: Vec<&str> = Vec::new();
    let finish = |out: &mut Vec<(&'static str, Block)>, body: &mut Vec<&str>| {
        if let Some((_, b)) = out.last_mut() {
            // Leading comment lines are the statement's doc; the rest is its text.
            let mut lines = body.drain(..).peekable();
            while let Some(l) = lines.peek() {
                if let Some(own) = l.trim().strip_prefix("-- own:") {
                    if b.doc.is_empty() {
                        b.own = Some(own.trim().to_string());
                    }
                } else if let Some(d) = l.trim().strip_prefix("--") {
                    b.doc.push(d.trim().to_string());
                } else if !l.trim().is_empty() || !b.doc.is_empty() {
                    break;
                }
                lines.next();
            }
            let mut text: Vec<&str> = lines.collect();
            // Comment lines at a block's end belong to what follows (a note
            // before the next marker), not to the block: a fragment expanded
            // mid-line must not end in a comment.
            while text
                .last()
                .is_some_and(|l| l.trim().is_empty() || l.trim().starts_with("--"))
            {
                text.pop();
            }
            let text = text.join("\n");
            b.text = text.trim().trim_end_matches(';').trim_end().to_string();
        }
    };
    for line in text.lines() {
        let t = line.trim();
        let marker = if let Some(n) = t.strip_prefix("-- name:") {
            Some(("name", n))
        } else if let Some(n) = t.strip_prefix("-- piece:") {
            Some(("piece", n))
        } else {
            t.strip_prefix("-- fragment:").map(|n| ("fragment", n))
        };
        match marker {
            Some((kind, name)) => {
                finish(&mut out, &mut body);
                let name = name.trim().to_string();
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                {
                    return Err(format!("{file}: `{name}` is not a lower_snake_case name").into());
                }
                out.push((
                    kind,
                    Block {
                        piece: kind == "piece",
                        name,
                        file: file.to_string(),
                        own: None,
                        doc: Vec::new(),
                        text: String::new(),
                    },
                ));
            }
            None if out.is_empty() => {
                if !t.is_empty() && !t.starts_with("--") {
                    return Err(format!("{file}: SQL before the first `-- name:`").into());
                }
            }
            None => body.push(line),
        }
    }
    finish(&mut out, &mut body);
    for (_, b) in &out {
        if b.text.is_empty() {
            return Err(format!("{file}: {} is empty", b.name).into());
        }
    }
    Ok(out)
}

fn expand(
    text: &str,
    fragments: &BTreeMap<String, String>,
    stack: &mut Vec<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "a `${` without its `}`".to_string())?;
        let name = &after[..end];
        let body = fragments
            .get(name)
            .ok_or_else(|| format!("no fragment {name}"))?;
        if stack.iter().any(|s| s == name) {
            return Err(format!("fragment {name} names itself"));
        }
        stack.push(name.to_string());
        out.push_str(&expand(body, fragments, stack)?);
        stack.pop();
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
