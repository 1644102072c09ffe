//! Avro values ⇄ the string channel's JSON text, with `apache-avro`
//! (default features off: no codec crates, no C).
//!
//! Decoding uses the writer's schema (the one the frame's id names), so old
//! and new versions of an evolved schema decode alike. A union decodes to
//! its branch's plain JSON value; bytes and fixed decode to arrays of
//! numbers (apache-avro's JSON mapping). Encoding resolves the JSON against
//! the schema (a JSON object becomes a record, a missing field takes its
//! default, a union takes the first branch the value fits) and refuses what
//! does not fit.

use apache_avro::types::Value as AvroValue;
use apache_avro::Schema;

/// The largest single allocation the Avro decoder makes (a string, bytes or
/// array length read from a payload). apache-avro keeps one process-wide
/// bound (default 512 MiB); a 10-byte value claiming a 500 MB string must not
/// allocate it. 64 MiB: the consumer's per-record inflation bound.
pub const MAX_AVRO_ALLOCATION: usize = 64 * 1024 * 1024;

/// Parses an Avro schema (and sets the decoder's allocation bound).
pub fn compile(text: &str) -> Result<Schema, String> {
    apache_avro::util::max_allocation_bytes(MAX_AVRO_ALLOCATION);
    Schema::parse_str(text).map_err(|e| format!("the Avro schema does not parse: {e}"))
}

/// Decodes one Avro datum of `schema` (the whole payload, after the framing) to JSON text.
pub fn decode(schema: &Schema, payload: &[u8]) -> Result<String, String> {
    apache_avro::util::max_allocation_bytes(MAX_AVRO_ALLOCATION);
    let mut rest = payload;
    #[allow(deprecated)] // the replacement builder API is still moving (0.22)
    let value = apache_avro::from_avro_datum(schema, &mut rest, None)
        .map_err(|e| format!("not an Avro datum of its schema: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("{} bytes left after the Avro datum", rest.len()));
    }
    let json = serde_json::Value::try_from(value).map_err(|e| format!("no JSON form: {e}"))?;
    Ok(json.to_string())
}

/// Encodes JSON text as one Avro datum of `schema`; refuses a value that does not fit it.
pub fn encode(schema: &Schema, json: &str) -> Result<Vec<u8>, String> {
    let json: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    let value = AvroValue::try_from(json).map_err(|e| format!("no Avro form: {e}"))?;
    let value = value
        .resolve(schema)
        .map_err(|e| format!("does not fit the Avro schema: {e}"))?;
    #[allow(deprecated)]
    apache_avro::to_avro_datum(schema, value).map_err(|e| format!("does not fit the Avro schema: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = r#"{"type":"record","name":"User","namespace":"t","fields":[
        {"name":"id","type":"long"},{"name":"name","type":"string"},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"nick","type":["null","string"],"default":null},
        {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}},
        {"name":"score","type":"double"}]}"#;

    #[test]
    fn json_round_trips_through_avro() {
        let s = compile(V1).unwrap();
        let row = r#"{"id":7,"name":"ann","tags":["x","y"],"nick":"a","kind":"B","score":1.5}"#;
        let bytes = encode(&s, row).unwrap();
        assert_eq!(decode(&s, &bytes).unwrap(), row);
        // a missing nullable field takes its default
        let bytes = encode(&s, r#"{"id":1,"name":"b","tags":[],"kind":"A","score":0.0}"#).unwrap();
        assert_eq!(
            decode(&s, &bytes).unwrap(),
            r#"{"id":1,"name":"b","tags":[],"nick":null,"kind":"A","score":0.0}"#
        );
    }

    #[test]
    fn rows_that_do_not_fit_are_refused() {
        let s = compile(V1).unwrap();
        for bad in [
            r#"{"id":"seven","name":"a","tags":[],"kind":"A","score":1}"#,
            r#"{"name":"a","tags":[],"kind":"A","score":1}"#,
            r#"{"id":1,"name":"a","tags":[],"kind":"C","score":1}"#,
            r#"[1,2]"#,
            "not json",
        ] {
            assert!(encode(&s, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_payloads_are_errors() {
        let s = compile(V1).unwrap();
        let good = encode(&s, r#"{"id":7,"name":"ann","tags":[],"kind":"B","score":1.5}"#).unwrap();
        for cut in 0..good.len() {
            assert!(decode(&s, &good[..cut]).is_err(), "{cut}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(decode(&s, &long).is_err());
        // a string claiming 2^40 bytes: refused without allocating it
        let claim = [0x80, 0x80, 0x80, 0x80, 0x80, 0x40];
        assert!(decode(&compile(r#""string""#).unwrap(), &claim).is_err());
        assert!(compile("{").is_err());
    }

    #[test]
    fn an_evolved_schema_decodes_old_and_new() {
        let v2 = V1.replace(
            r#"{"name":"score","type":"double"}]"#,
            r#"{"name":"score","type":"double"},{"name":"email","type":["null","string"],"default":null}]"#,
        );
        let (s1, s2) = (compile(V1).unwrap(), compile(&v2).unwrap());
        let old = encode(&s1, r#"{"id":1,"name":"a","tags":[],"kind":"A","score":2.0}"#).unwrap();
        let new = encode(
            &s2,
            r#"{"id":2,"name":"b","tags":[],"kind":"A","score":2.0,"email":"e"}"#,
        )
        .unwrap();
        assert!(decode(&s1, &old).unwrap().contains(r#""id":1"#));
        assert!(decode(&s2, &new).unwrap().ends_with(r#""email":"e"}"#));
    }
}
