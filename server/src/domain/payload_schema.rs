//! Payload schemas: a queue's `payload_schema` (a JSON Schema document) and
//! the check of a payload against it.
//!
//! Schemas are compiled without any way to fetch a resource: a `$ref` to a
//! remote (or file) document fails the compile, so UpdateQueue refuses the
//! schema instead of the broker reaching out to the network. `pattern`s use
//! the linear-time regex engine (no backtracking), so a hostile pattern cannot
//! make a check run long. Payloads are parsed with serde_json's nesting limit
//! (128 levels), so a deeply nested payload is refused, never a stack overflow.

use jsonschema::{PatternOptions, Retrieve, Uri, Validator};
use serde_json::Value;

/// The largest `payload_schema` UpdateQueue accepts, in bytes of its text.
/// Schemas are compiled into memory and kept per queue, so the limit bounds
/// what one queue costs every replica.
pub const MAX_PAYLOAD_SCHEMA_BYTES: usize = 64 * 1024;

/// The longest error text a refusal quotes (the rest is cut with "...").
const MAX_ERROR_CHARS: usize = 300;

/// Refuses every external resource: schemas must be self-contained.
struct NoFetch;

impl Retrieve for NoFetch {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!(
            "remote $ref {} is not fetched (schemas must be self-contained)",
            uri.as_str()
        )
        .into())
    }
}

/// Compiles a schema text; the error is one line saying why it is refused.
pub fn compile(text: &str) -> Result<Validator, String> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| one_line(&format!("is not JSON: {e}")))?;
    if !(doc.is_object() || doc.is_boolean()) {
        return Err("is not a JSON Schema (must be an object or a boolean)".into());
    }
    jsonschema::options()
        .with_retriever(NoFetch)
        .with_pattern_options(PatternOptions::regex())
        .build(&doc)
        .map_err(|e| {
            let at = e.instance_path().as_str();
            let at = if at.is_empty() {
                String::new()
            } else {
                format!(" at {at}")
            };
            one_line(&format!("is not a valid JSON Schema{at}: {e}"))
        })
}

/// Checks a payload against a compiled schema: `Err` names the first error
/// as `JSON-pointer: message` (`/amount: "x" is not of type "integer"`; the
/// root is `/`), or says the payload is not JSON.
pub fn check(schema: &Validator, payload: &[u8]) -> Result<(), String> {
    let doc: Value = serde_json::from_slice(payload).map_err(|e| {
        one_line(&format!(
            "is not JSON (the queue has a payload_schema): {e}"
        ))
    })?;
    match schema.iter_errors(&doc).next() {
        None => Ok(()),
        Some(e) => {
            let at = e.instance_path().as_str();
            let at = if at.is_empty() { "/" } else { at };
            Err(one_line(&format!("{at}: {e}")))
        }
    }
}

/// One line, at most [`MAX_ERROR_CHARS`] characters.
fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}...", &flat[..cut]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER: &str = r#"{"type":"object","required":["amount"],
        "properties":{"amount":{"type":"integer"},"note":{"type":"string"}}}"#;

    #[test]
    fn a_matching_payload_passes_and_the_first_error_names_its_path() {
        let v = compile(ORDER).unwrap();
        assert_eq!(check(&v, br#"{"amount": 3}"#), Ok(()));
        assert_eq!(
            check(&v, br#"{"amount": "x"}"#).unwrap_err(),
            r#"/amount: "x" is not of type "integer""#
        );
        assert!(check(&v, b"{}").unwrap_err().starts_with("/: "));
    }

    #[test]
    fn a_payload_that_is_not_json_is_refused() {
        let v = compile(ORDER).unwrap();
        assert!(
            check(&v, b"not json")
                .unwrap_err()
                .starts_with("is not JSON")
        );
        assert!(
            check(&v, &[0xff, 0xfe])
                .unwrap_err()
                .starts_with("is not JSON")
        );
    }

    #[test]
    fn a_deeply_nested_payload_is_refused_without_overflow() {
        let v = compile(
            r##"{"$ref":"#/$defs/n","$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}}}"##,
        )
        .unwrap();
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(
            check(&v, deep.as_bytes())
                .unwrap_err()
                .starts_with("is not JSON")
        );
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(check(&v, ok.as_bytes()), Ok(()));
    }

    #[test]
    fn bad_schemas_are_refused_in_one_line() {
        assert!(compile("{").unwrap_err().starts_with("is not JSON"));
        assert!(
            compile("3")
                .unwrap_err()
                .contains("must be an object or a boolean")
        );
        let e = compile(r#"{"type": "nope"}"#).unwrap_err();
        assert!(e.starts_with("is not a valid JSON Schema"), "{e}");
        assert!(!e.contains('\n'));
        assert!(compile("true").is_ok());
    }

    #[test]
    fn remote_refs_are_not_fetched() {
        for r in [
            "https://example.com/s.json",
            "http://127.0.0.1:9/s.json",
            "file:///etc/passwd",
        ] {
            let e = compile(&format!(r#"{{"$ref":"{r}"}}"#)).unwrap_err();
            assert!(e.contains("is not fetched"), "{e}");
        }
    }

    #[test]
    fn long_errors_are_cut() {
        let v = compile(r#"{"type":"array"}"#).unwrap();
        let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(10_000));
        let e = check(&v, big.as_bytes()).unwrap_err();
        assert!(e.chars().count() <= MAX_ERROR_CHARS + 3);
    }
}
