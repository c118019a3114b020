//! Payload inputs from a queue's payload schema: when the schema is an object
//! whose top-level properties are all strings, numbers, integers, booleans or
//! enums, a form shows one input per property (required ones marked) and
//! builds the JSON payload from them; any other schema (or none) keeps the
//! raw payload textarea. The broker still checks the payload it builds.

use std::collections::BTreeMap;

use maud::{Markup, html};
use serde_json::{Map, Value};

/// The prefix of the inputs' names (`pf.amount`).
pub const PREFIX: &str = "pf.";

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    String,
    Number,
    Integer,
    Boolean,
    /// The allowed values, as JSON.
    Enum(Vec<Value>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub kind: Kind,
    pub required: bool,
    pub description: Option<String>,
}

fn kind_of(p: &Value) -> Option<Kind> {
    if let Some(values) = p.get("enum").and_then(Value::as_array) {
        return (!values.is_empty()).then(|| Kind::Enum(values.clone()));
    }
    match p.get("type")?.as_str()? {
        "string" => Some(Kind::String),
        "number" => Some(Kind::Number),
        "integer" => Some(Kind::Integer),
        "boolean" => Some(Kind::Boolean),
        _ => None,
    }
}

/// The inputs a schema allows, or `None` when the form must keep the textarea.
pub fn fields_of(schema: &str) -> Option<Vec<Field>> {
    let s: Value = serde_json::from_str(schema).ok()?;
    if s.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    let props = s.get("properties")?.as_object()?;
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Option<Vec<Field>> = props
        .iter()
        .map(|(name, p)| {
            Some(Field {
                name: name.clone(),
                kind: kind_of(p)?,
                required: required.contains(&name.as_str()),
                description: p
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            })
        })
        .collect();
    fields.filter(|f| !f.is_empty())
}

/// The text an input shows for a value of the payload.
fn shown(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// The inputs, filled from `payload` (a JSON object; other payloads leave them blank).
pub fn render(fields: &[Field], payload: &str) -> Markup {
    let values: Map<String, Value> = serde_json::from_str(payload).unwrap_or_default();
    html! {
        fieldset.payload-fields {
            legend { "Payload (from the queue's payload schema; * required)" }
            input type="hidden" name="payload_fields" value="1";
            @for (i, f) in fields.iter().enumerate() {
                @let id = format!("pf-{i}");
                @let name = format!("{PREFIX}{}", f.name);
                @let value = shown(values.get(&f.name));
                label for=(id) {
                    (f.name) @if f.required { " *" }
                    @if let Some(d) = &f.description { span.muted { " (" (d) ")" } }
                }
                @match &f.kind {
                    Kind::Boolean => select id=(id) name=(name) required[f.required] {
                        option value="" { "(unset)" }
                        option value="true" selected[value == "true"] { "true" }
                        option value="false" selected[value == "false"] { "false" }
                    },
                    Kind::Enum(options) => select id=(id) name=(name) required[f.required] {
                        option value="" { "(unset)" }
                        @for o in options {
                            @let text = o.to_string();
                            option value=(text) selected[values.get(&f.name) == Some(o)] { (shown(Some(o))) }
                        }
                    },
                    Kind::Integer => input id=(id) name=(name) inputmode="numeric" required[f.required] value=(value);,
                    Kind::Number => input id=(id) name=(name) inputmode="decimal" required[f.required] value=(value);,
                    Kind::String => input id=(id) name=(name) required[f.required] value=(value);,
                }
            }
        }
    }
}

/// The JSON payload the inputs make (blank inputs are left out); errors are
/// one line naming the property.
pub fn build(fields: &[Field], form: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = Map::new();
    for f in fields {
        let raw = form
            .get(&format!("{PREFIX}{}", f.name))
            .map(String::as_str)
            .unwrap_or_default();
        let t = raw.trim();
        if t.is_empty() {
            continue;
        }
        let bad = |what: &str| format!("task.payload.{}: {t:?} is not {what}", f.name);
        let v = match &f.kind {
            Kind::String => Value::String(raw.to_string()),
            Kind::Integer => Value::from(t.parse::<i64>().map_err(|_| bad("a whole number"))?),
            Kind::Number => t
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| bad("a number"))?,
            Kind::Boolean => match t {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(bad("true or false")),
            },
            // A choice's value is its JSON text (`"gold"`, `3`).
            Kind::Enum(options) => serde_json::from_str::<Value>(t)
                .ok()
                .filter(|v| options.contains(v))
                .ok_or_else(|| bad("one of the choices"))?,
        };
        out.insert(f.name.clone(), v);
    }
    Ok(Value::Object(out).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER: &str = r#"{"type":"object","required":["amount"],"properties":{
        "amount":{"type":"integer","description":"cents"},"note":{"type":"string"},
        "rush":{"type":"boolean"},"rate":{"type":"number"},"tier":{"enum":["a","b",3]}}}"#;

    #[test]
    fn scalar_properties_become_fields_and_others_keep_the_textarea() {
        let f = fields_of(ORDER).unwrap();
        assert_eq!(f.len(), 5);
        let amount = f.iter().find(|f| f.name == "amount").unwrap();
        assert!(amount.required);
        assert_eq!(amount.kind, Kind::Integer);
        assert_eq!(amount.description.as_deref(), Some("cents"));
        assert_eq!(
            fields_of(r#"{"type":"object","properties":{"a":{"type":"array"}}}"#),
            None
        );
        assert_eq!(fields_of(r#"{"type":"array"}"#), None);
        assert_eq!(fields_of("true"), None);
        assert_eq!(fields_of("not json"), None);
    }

    #[test]
    fn the_inputs_build_the_payload() {
        let f = fields_of(ORDER).unwrap();
        let form: BTreeMap<String, String> = [
            ("pf.amount", " 12 "),
            ("pf.note", "hi"),
            ("pf.rush", "true"),
            ("pf.rate", ""),
            ("pf.tier", "3"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let p: Value = serde_json::from_str(&build(&f, &form).unwrap()).unwrap();
        assert_eq!(
            p,
            serde_json::json!({"amount": 12, "note": "hi", "rush": true, "tier": 3})
        );
        let mut bad = form.clone();
        bad.insert("pf.amount".into(), "1.5".into());
        assert!(
            build(&f, &bad)
                .unwrap_err()
                .starts_with("task.payload.amount:")
        );
        bad.insert("pf.amount".into(), "1".into());
        bad.insert("pf.tier".into(), "\"z\"".into());
        assert!(
            build(&f, &bad)
                .unwrap_err()
                .starts_with("task.payload.tier:")
        );
    }

    #[test]
    fn the_inputs_show_the_payload_values() {
        let f = fields_of(ORDER).unwrap();
        let html = render(&f, r#"{"amount": 7, "tier": "b", "rush": false}"#).into_string();
        assert!(html.contains(r#"name="pf.amount""#), "{html}");
        assert!(html.contains(r#"value="7""#), "{html}");
        assert!(
            html.contains(r#"<option value="&quot;b&quot;" selected>b</option>"#),
            "{html}"
        );
        assert!(html.contains("amount *"), "{html}");
    }
}
