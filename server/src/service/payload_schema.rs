//! Payload schemas at run time: each queue's compiled `payload_schema`, kept
//! while its text stays the same, and the check every submit path makes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jsonschema::Validator;

use super::Settings;
use crate::domain::payload_schema::{self, MAX_PAYLOAD_SCHEMA_BYTES};
use crate::domain::validate::{self, Invalid};

/// Compiled schemas by queue, each with the text it was compiled from: a
/// schema is compiled once per replica and text, not per task. A queue whose
/// text changed gets its entry replaced; one that dropped its schema keeps
/// the entry until it sets one again (at most one per queue).
#[derive(Clone, Default)]
pub struct SchemaCache(Arc<Mutex<HashMap<String, Compiled>>>);

/// A schema's text and its compiled form.
type Compiled = (String, Arc<Validator>);

impl std::fmt::Debug for SchemaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SchemaCache")
    }
}

impl SchemaCache {
    /// The compiled form of `text`, the schema of `queue`.
    pub fn get(&self, queue: &str, text: &str) -> Result<Arc<Validator>, String> {
        {
            let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((t, v)) = map.get(queue)
                && t == text
            {
                return Ok(v.clone());
            }
        }
        // Compiled outside the lock: a large schema does not hold up other queues.
        let v = Arc::new(payload_schema::compile(text)?);
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(queue.to_string(), (text.to_string(), v.clone()));
        Ok(v)
    }
}

/// Checks a `payload_schema` given to UpdateQueue: size, then that it compiles.
pub fn validate_schema(text: &str) -> Result<(), Invalid> {
    const FIELD: &str = "config.payload_schema";
    validate::size(FIELD, text.len(), MAX_PAYLOAD_SCHEMA_BYTES)?;
    payload_schema::compile(text)
        .map(|_| ())
        .map_err(|e| Invalid::new(FIELD, e))
}

impl Settings {
    /// Checks `payload` against the live `payload_schema` of `queue`, if it
    /// has one; the error names `field` (e.g. `tasks[3].payload`).
    pub fn check_payload(&self, field: &str, queue: &str, payload: &[u8]) -> Result<(), Invalid> {
        let live = self.live.snapshot();
        let Some(text) = live
            .get(queue)
            .and_then(|q| q.config.payload_schema.as_deref())
        else {
            return Ok(());
        };
        let schema = self.schemas.get(queue, text).map_err(|e| {
            Invalid::new(
                field,
                format!("cannot be checked: the queue's payload_schema {e}"),
            )
        })?;
        payload_schema::check(&schema, payload).map_err(|e| Invalid::new(field, e))
    }
}
