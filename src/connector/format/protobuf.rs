//! Protobuf values ⇄ the string channel's JSON text, with dynamic messages:
//! `protox` compiles the registry's `.proto` text at run time (no `protoc`,
//! pure Rust) and `prost-reflect` decodes, encodes and maps messages to JSON.
//!
//! Which message of the file a value holds is the Confluent message-index
//! path of its frame ([`crate::wire::confluent`]): the first index picks a
//! top-level message in declaration order, each next one a nested message
//! of the previous (nested types in declaration order, map-entry types
//! included, as in the descriptor). A sink writes the file's first
//! message (`[0]`, the single byte `0` on the wire).
//!
//! The JSON form is proto3's JSON mapping with three choices made for a
//! row bridge: field names as written in the `.proto` (not lowerCamelCase),
//! every field present (a proto3 default is indistinguishable from unset
//! anyway), and 64-bit integers as JSON numbers (serde_json keeps them
//! exact). Enums are their value names, `bytes` base64. Encoding accepts
//! either field-name form, 64-bit integers as numbers or strings, and
//! refuses a field the message does not have.
//!
//! Imports: the well-known `google/protobuf/*.proto` files, and the
//! schema's registry references (named as the `import` names them).

use std::collections::HashMap;

use prost::Message as _;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

/// The name the schema's own text is compiled under.
const ROOT_FILE: &str = "clink_registry_schema.proto";

/// A compiled `.proto` schema: its file's messages by index path.
#[derive(Clone, Debug)]
pub struct ProtoSchema {
    pool: DescriptorPool,
    file: String,
}

/// The schema text and the texts of its references (import name → text).
struct InMemory(HashMap<String, String>);

impl FileResolver for InMemory {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.get(name) {
            Some(text) => File::from_source(name, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// Compiles `text`; `references` are the imported files' texts by import name.
pub fn compile(text: &str, references: &[(String, String)]) -> Result<ProtoSchema, String> {
    let mut files: HashMap<String, String> = references.iter().cloned().collect();
    files.insert(ROOT_FILE.to_owned(), text.to_owned());
    let mut resolver = ChainFileResolver::new();
    resolver.add(InMemory(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler
        .open_file(ROOT_FILE)
        .map_err(|e| format!("the .proto schema does not compile: {e}"))?;
    let pool = compiler.descriptor_pool();
    let schema = ProtoSchema {
        pool,
        file: ROOT_FILE.to_owned(),
    };
    if schema.message(&[0]).is_err() {
        return Err("the .proto schema declares no message".into());
    }
    Ok(schema)
}

impl ProtoSchema {
    /// The message type at a Confluent index path (`[0]`: the first message).
    pub fn message(&self, indexes: &[i32]) -> Result<MessageDescriptor, String> {
        let file = self
            .pool
            .get_file_by_name(&self.file)
            .ok_or_else(|| "the compiled schema lost its file".to_owned())?;
        let out_of_range = |depth: usize, i: i32, n: usize| {
            format!("message index {i} at depth {depth} of {indexes:?} is out of range: the schema has {n} there")
        };
        let (&first, rest) = indexes
            .split_first()
            .ok_or_else(|| "an empty message-index path".to_owned())?;
        let n = file.messages().len();
        let mut desc = usize::try_from(first)
            .ok()
            .and_then(|i| file.messages().nth(i))
            .ok_or_else(|| out_of_range(0, first, n))?;
        for (depth, &i) in rest.iter().enumerate() {
            let n = desc.child_messages().len();
            desc = usize::try_from(i)
                .ok()
                .and_then(|i| desc.child_messages().nth(i))
                .ok_or_else(|| out_of_range(depth + 1, i, n))?;
        }
        Ok(desc)
    }
}

fn serialize_options() -> SerializeOptions {
    SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false)
        .stringify_64_bit_integers(false)
}

/// The message at `indexes` in `payload`, as JSON text.
pub fn decode(schema: &ProtoSchema, indexes: &[i32], payload: &[u8]) -> Result<String, String> {
    let desc = schema.message(indexes)?;
    // prost bounds every length by the bytes left and nesting by its
    // recursion limit (100): hostile bytes give an error, not an allocation.
    let message = DynamicMessage::decode(desc.clone(), payload)
        .map_err(|e| format!("not a {} message: {e}", desc.full_name()))?;
    let mut out = serde_json::Serializer::new(Vec::with_capacity(payload.len() * 2 + 16));
    message
        .serialize_with_options(&mut out, &serialize_options())
        .map_err(|e| format!("no JSON form: {e}"))?;
    String::from_utf8(out.into_inner()).map_err(|e| format!("no JSON form: {e}"))
}

/// A JSON row → the wire bytes of the file's first message (`[0]`).
pub fn encode(schema: &ProtoSchema, json: &str) -> Result<Vec<u8>, String> {
    let desc = schema.message(&[0])?;
    let mut de = serde_json::Deserializer::from_str(json);
    let message = DynamicMessage::deserialize_with_options(desc.clone(), &mut de, &DeserializeOptions::new())
        .map_err(|e| format!("does not fit the Protobuf message {}: {e}", desc.full_name()))?;
    de.end()
        .map_err(|e| format!("does not fit the Protobuf message {}: {e}", desc.full_name()))?;
    Ok(message.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const ORDER: &str = r#"
        syntax = "proto3";
        package clink.test;
        import "google/protobuf/timestamp.proto";
        message Order {
          int64 id = 1;
          string item = 2;
          repeated string tags = 3;
          Status status = 4;
          Line line = 5;
          map<string, int32> counts = 6;
          google.protobuf.Timestamp at = 7;
          enum Status { NEW = 0; PAID = 1; }
          message Line { string sku = 1; double qty = 2; }
        }
        message Other { bool flag = 1; }
    "#;

    #[test]
    fn json_round_trips_through_protobuf() {
        let s = compile(ORDER, &[]).unwrap();
        let row = r#"{"id":9000000000,"item":"tea","tags":["a","b"],"status":"PAID","line":{"sku":"x","qty":1.5},"counts":{"k":2},"at":"2026-12-04T02:00:00Z"}"#;
        let bytes = encode(&s, row).unwrap();
        let back = decode(&s, &[0], &bytes).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&back).unwrap(),
            serde_json::from_str::<serde_json::Value>(row).unwrap()
        );
        // Defaults are present; lowerCamelCase and string int64 are accepted.
        let bytes = encode(&s, r#"{"id":"7"}"#).unwrap();
        assert_eq!(
            decode(&s, &[0], &bytes).unwrap(),
            r#"{"id":7,"item":"","tags":[],"status":"NEW","counts":{}}"#
        );
    }

    #[test]
    fn index_paths_pick_nested_and_later_messages() {
        let s = compile(ORDER, &[]).unwrap();
        assert_eq!(s.message(&[0]).unwrap().full_name(), "clink.test.Order");
        assert_eq!(s.message(&[1]).unwrap().full_name(), "clink.test.Other");
        // The map field comes first in the text, so its entry type is the
        // first nested type, as protoc also orders them in the descriptor.
        assert!(s.message(&[0, 0]).unwrap().is_map_entry());
        assert_eq!(s.message(&[0, 1]).unwrap().full_name(), "clink.test.Order.Line");
        for bad in [&[2][..], &[0, 2], &[1, 0], &[-1], &[]] {
            let e = s.message(bad).unwrap_err();
            assert!(e.contains("out of range") || e.contains("empty"), "{bad:?}: {e}");
        }
        let other = [0x08, 0x01];
        assert_eq!(decode(&s, &[1], &other).unwrap(), r#"{"flag":true}"#);
        assert!(decode(&s, &[5], &other).unwrap_err().contains("out of range"));
    }

    #[test]
    fn rows_and_payloads_that_do_not_fit_are_refused() {
        let s = compile(ORDER, &[]).unwrap();
        for bad in [
            r#"{"id":"x"}"#,
            r#"{"nope":1}"#,
            r#"{"status":"LOST"}"#,
            r#"{"tags":"a"}"#,
            "[1]",
            "not json",
            r#"{"id":1} trailing"#,
        ] {
            assert!(encode(&s, bad).is_err(), "{bad}");
        }
        // 08 01 | 12 03 'abc' | 2a 03 (0a 01 's'): a cut between two fields
        // leaves a shorter valid message (Protobuf has no end marker); a cut
        // inside a field is an error.
        let good = encode(&s, r#"{"id":1,"item":"abc","line":{"sku":"s"}}"#).unwrap();
        assert_eq!(good.len(), 12);
        let whole: Vec<usize> = (1..good.len())
            .filter(|cut| decode(&s, &[0], &good[..*cut]).is_ok())
            .collect();
        assert_eq!(whole, [2, 7]);
        // A string claiming 2 GB, a group wire type, a zero tag.
        for hostile in [&[0x12, 0xff, 0xff, 0xff, 0xff, 0x07][..], &[0x13], &[0x00, 0x00]] {
            assert!(decode(&s, &[0], hostile).is_err(), "{hostile:?}");
        }
        // Deep nesting stops at the recursion limit, with an error.
        let nested = "syntax = \"proto3\"; message N { N n = 1; }";
        let n = compile(nested, &[]).unwrap();
        let mut deep = Vec::new();
        for _ in 0..200 {
            let mut outer = vec![0x0a];
            let len = deep.len();
            let mut l = len;
            while l >= 0x80 {
                outer.push((l as u8) | 0x80);
                l >>= 7;
            }
            outer.push(l as u8);
            outer.extend_from_slice(&deep);
            deep = outer;
        }
        assert!(decode(&n, &[0], &deep).is_err());
        assert!(compile("syntax = \"proto3\"; message {", &[]).is_err());
        assert!(compile("syntax = \"proto3\";", &[]).is_err());
        assert!(compile("syntax = \"proto3\"; import \"missing.proto\"; message A {}", &[]).is_err());
    }

    #[test]
    fn references_are_imported_by_name() {
        let common = "syntax = \"proto3\"; package c; message Money { int64 cents = 1; string cur = 2; }";
        let text = "syntax = \"proto3\"; import \"common/money.proto\"; message Price { c.Money m = 1; }";
        let s = compile(text, &[("common/money.proto".into(), common.into())]).unwrap();
        let bytes = encode(&s, r#"{"m":{"cents":250,"cur":"EUR"}}"#).unwrap();
        assert_eq!(decode(&s, &[0], &bytes).unwrap(), r#"{"m":{"cents":250,"cur":"EUR"}}"#);
    }
}
