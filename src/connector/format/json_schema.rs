//! JSON Schema values ⇄ the string channel's JSON text, validated with the
//! `jsonschema` crate (default features off: no HTTP resolver, no TLS
//! stack; a schema that `$ref`s a remote document does not compile).
//!
//! The payload after the Confluent frame is the JSON text itself (as
//! Confluent's and Apicurio's JSON Schema serdes write it). Decoding parses
//! and validates it, and hands over the compact JSON; encoding validates the
//! row and writes its compact JSON.

use jsonschema::Validator;
use serde_json::Value;

/// Compiles a JSON Schema into a validator.
pub fn compile(text: &str) -> Result<Validator, String> {
    let schema: Value = serde_json::from_str(text).map_err(|e| format!("the JSON Schema is not JSON: {e}"))?;
    jsonschema::validator_for(&schema).map_err(|e| format!("the JSON Schema does not compile: {e}"))
}

fn check(validator: &Validator, json: &str) -> Result<Value, String> {
    let value: Value = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    validator
        .validate(&value)
        .map_err(|e| format!("does not fit the JSON Schema: {e} (at {})", e.instance_path()))?;
    Ok(value)
}

/// Checks a UTF-8 JSON payload against the schema and returns it as compact JSON text.
pub fn decode(validator: &Validator, payload: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(payload).map_err(|e| format!("not UTF-8: {e}"))?;
    check(validator, text).map(|v| v.to_string())
}

/// Checks JSON text against the schema and returns its compact bytes.
pub fn encode(validator: &Validator, json: &str) -> Result<Vec<u8>, String> {
    check(validator, json).map(|v| v.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}},
        "required":["id"],"additionalProperties":false}"#;

    #[test]
    fn valid_rows_round_trip_and_misfits_are_refused() {
        let v = compile(SCHEMA).unwrap();
        let bytes = encode(&v, r#"{"id": 1, "name": "a"}"#).unwrap();
        assert_eq!(decode(&v, &bytes).unwrap(), r#"{"id":1,"name":"a"}"#);
        for bad in [
            r#"{"name":"a"}"#,
            r#"{"id":"x"}"#,
            r#"{"id":1,"other":2}"#,
            "nope",
            "[1]",
        ] {
            assert!(encode(&v, bad).is_err(), "{bad}");
            assert!(decode(&v, bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(decode(&v, &[0xff]).is_err());
        assert!(compile("{").is_err());
        assert!(compile(r#"{"type": 5}"#).is_err());
    }
}
