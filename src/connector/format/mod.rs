//! Registry-framed value formats on the string channel (spec: `format =
//! avro | protobuf | json-schema`): the source decodes each Confluent-framed
//! value ([`crate::wire::confluent`]) to one JSON object text, the string
//! sinks encode each JSON row and frame it with its schema id.
//!
//! - [`ValueDecoder`] (sources): the frame's schema id → the schema (fetched
//!   from the registry once per id, compiled once) → JSON text. Every
//!   failure (framing, unknown id, registry down, a payload that does not
//!   fit) is a [`DecodeFailure`] the source turns into its `decode_error`
//!   path.
//! - [`ValueEncoder`] (sinks): at `open`, the subject's schema: registered
//!   from `schema_registry_value_schema` when `schema_registry_auto_register`
//!   is true, else the subject's latest version. Then each row is encoded
//!   synchronously; a row that does not fit is refused (the sink counts it).
//!
//! Avro ([`avro`]), Protobuf ([`protobuf`]: the frame's message-index path
//! picks the message type) and JSON Schema ([`json_schema`]).
//!
//! A namespace module: its items are reached only as `clink_kafka::connector::format::*` and are
//! not re-exported elsewhere (registry-framed value formats, one submodule per format).

pub mod avro;
pub mod json_schema;
pub mod protobuf;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::error::{ConnectorError, Result};
use crate::schema_registry::{
    RegisteredSchema, RegistryAuth, RegistryConfig, RegistryError, SchemaRegistryClient, SchemaType,
};
use crate::wire::confluent;
use crate::wire::secret::Secret;

/// A registry-framed value format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFormat {
    /// Apache Avro (`format = 'avro'`).
    Avro,
    /// Protocol Buffers (`format = 'protobuf'`).
    Protobuf,
    /// JSON Schema (`format = 'json-schema'`).
    JsonSchema,
}

impl ValueFormat {
    /// The option value: `avro`, `protobuf` or `json-schema`.
    pub fn name(self) -> &'static str {
        match self {
            ValueFormat::Avro => "avro",
            ValueFormat::Protobuf => "protobuf",
            ValueFormat::JsonSchema => "json-schema",
        }
    }

    /// The registry's schema language for this format.
    pub fn schema_type(self) -> SchemaType {
        match self {
            ValueFormat::Avro => SchemaType::Avro,
            ValueFormat::Protobuf => SchemaType::Protobuf,
            ValueFormat::JsonSchema => SchemaType::Json,
        }
    }

    /// `avro`, `protobuf` or `json-schema`; `None` for the verbatim formats
    /// (`json`, `text`, `plain`).
    pub fn parse(option: &str, value: &str) -> Result<Option<ValueFormat>> {
        match value.trim().to_ascii_lowercase().as_str() {
            "json" | "text" | "plain" => Ok(None),
            "avro" => Ok(Some(ValueFormat::Avro)),
            "protobuf" => Ok(Some(ValueFormat::Protobuf)),
            "json-schema" => Ok(Some(ValueFormat::JsonSchema)),
            _ => Err(ConnectorError::invalid(
                option,
                value,
                "one of json, text, avro, protobuf, json-schema",
            )),
        }
    }
}

/// The registry options of a string factory.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    /// The value format.
    pub format: ValueFormat,
    /// Where the registry is and how to reach it (`schema_registry_url`, credentials, TLS).
    pub registry: RegistryConfig,
    /// `schema_registry_subject`; `None`: `<topic>-value`.
    pub subject: Option<String>,
    /// `schema_registry_auto_register` (default false).
    pub auto_register: bool,
    /// `schema_registry_value_schema`: the schema a sink registers when
    /// `auto_register` is on.
    pub value_schema: Option<String>,
}

impl FormatOptions {
    /// `format` with the registry at `url`, subject `<topic>-value`, no auto-registration.
    pub fn new(format: ValueFormat, url: impl Into<String>) -> Self {
        FormatOptions {
            format,
            registry: RegistryConfig::new(url),
            subject: None,
            auto_register: false,
            value_schema: None,
        }
    }

    /// The subject for `topic`: `schema_registry_subject`, or `<topic>-value`.
    pub fn subject_for(&self, topic: &str) -> String {
        self.subject.clone().unwrap_or_else(|| format!("{topic}-value"))
    }
}

/// The options [`parse_options`] reads (besides `format`).
pub const REGISTRY_OPTIONS: &[&str] = &[
    "schema_registry_url",
    "schema_registry_subject",
    "schema_registry_auto_register",
    "schema_registry_value_schema",
    "schema_registry_basic_auth_user_info",
    "schema_registry_bearer_auth_token",
    "schema_registry_ssl_ca_location",
    "schema_registry_timeout_ms",
];

/// Reads `format` and the `schema_registry_*` options through `get`
/// (canonical name → (value, name as written)). `sink`: whether the
/// subject/registration options apply.
pub fn parse_options<'a>(
    get: impl Fn(&str) -> Option<(&'a str, &'a str)>,
    sink: bool,
) -> Result<Option<FormatOptions>> {
    let format = match get("format") {
        Some((v, k)) => ValueFormat::parse(k, v)?,
        None => None,
    };
    let Some(format) = format else {
        if let Some(option) = REGISTRY_OPTIONS.iter().find(|o| get(o).is_some()) {
            return Err(ConnectorError::invalid(
                *option,
                "(set)",
                "no schema_registry_* option without format = 'avro', 'protobuf' or 'json-schema'",
            ));
        }
        return Ok(None);
    };
    let url = match get("schema_registry_url") {
        Some((v, _)) if !v.trim().is_empty() => v.trim().to_owned(),
        _ => {
            return Err(ConnectorError::invalid(
                "schema_registry_url",
                "(none)",
                format!(
                    "the registry's URL (http://host:port[/path]), required by format = '{}'",
                    format.name()
                ),
            ))
        }
    };
    let mut o = FormatOptions::new(format, url);
    if let Some((v, k)) = get("schema_registry_subject") {
        if v.trim().is_empty() {
            return Err(ConnectorError::invalid(k, v, "a non-empty subject name"));
        }
        o.subject = Some(v.trim().to_owned());
    }
    if let Some((v, k)) = get("schema_registry_auto_register") {
        o.auto_register = super::options::parse_bool(k, v)?;
    }
    if let Some((v, k)) = get("schema_registry_value_schema") {
        if v.trim().is_empty() {
            return Err(ConnectorError::invalid(k, "(empty)", "a schema text"));
        }
        o.value_schema = Some(v.to_owned());
    }
    if !sink {
        for option in [
            "schema_registry_subject",
            "schema_registry_auto_register",
            "schema_registry_value_schema",
        ] {
            if get(option).is_some() {
                return Err(ConnectorError::invalid(
                    option,
                    "(set)",
                    "nothing on a source: a source reads the schema id each value carries",
                ));
            }
        }
    } else if o.auto_register && o.value_schema.is_none() {
        return Err(ConnectorError::invalid(
            "schema_registry_value_schema",
            "(none)",
            "the schema text to register, required by schema_registry_auto_register = true",
        ));
    }
    let basic = get("schema_registry_basic_auth_user_info");
    let bearer = get("schema_registry_bearer_auth_token");
    o.registry.auth = match (basic, bearer) {
        (Some(_), Some(_)) => {
            return Err(ConnectorError::ConflictingOptions {
                message: "schema_registry_basic_auth_user_info and schema_registry_bearer_auth_token are both set; \
                          choose one"
                    .into(),
            })
        }
        (Some((v, k)), None) => {
            if !v.contains(':') {
                return Err(ConnectorError::invalid(k, "(secret)", "user:password"));
            }
            RegistryAuth::Basic {
                user_info: Secret::new(v),
            }
        }
        (None, Some((v, k))) => {
            if v.trim().is_empty() {
                return Err(ConnectorError::invalid(k, "(secret)", "a non-empty token"));
            }
            RegistryAuth::Bearer { token: Secret::new(v) }
        }
        (None, None) => RegistryAuth::None,
    };
    if let Some((v, _)) = get("schema_registry_ssl_ca_location") {
        o.registry.tls.ca_file = Some(v.into());
    }
    if let Some((v, k)) = get("schema_registry_timeout_ms") {
        let ms: u64 = v
            .trim()
            .parse()
            .ok()
            .filter(|ms| (1..=600_000).contains(ms))
            .ok_or_else(|| ConnectorError::invalid(k, v, "milliseconds from 1 to 600000"))?;
        o.registry.timeout = Duration::from_millis(ms);
    }
    // URL and TLS files are checked at build, before any I/O.
    SchemaRegistryClient::new(o.registry.clone()).map_err(registry_config_error)?;
    Ok(Some(o))
}

fn registry_config_error(e: RegistryError) -> ConnectorError {
    match e {
        RegistryError::Config { option, reason } => ConnectorError::invalid(option, "(see reason)", reason),
        other => ConnectorError::SchemaRegistry(other),
    }
}

/// A compiled schema, by language.
enum Compiled {
    Avro(apache_avro::Schema),
    JsonSchema(jsonschema::Validator),
    Protobuf(protobuf::ProtoSchema),
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compiled::Avro(s) => f.debug_tuple("Avro").field(s).finish(),
            Compiled::JsonSchema(_) => f.write_str("JsonSchema"),
            Compiled::Protobuf(_) => f.write_str("Protobuf"),
        }
    }
}

fn compile(format: ValueFormat, schema: &RegisteredSchema) -> std::result::Result<Compiled, String> {
    let (schema_type, text) = (schema.schema_type, schema.text.as_str());
    if schema_type != format.schema_type() {
        return Err(format!(
            "the registry holds a {} schema, and this operator reads {}",
            schema_type.name(),
            format.name()
        ));
    }
    match format {
        ValueFormat::Avro => avro::compile(text).map(Compiled::Avro),
        ValueFormat::JsonSchema => json_schema::compile(text).map(Compiled::JsonSchema),
        ValueFormat::Protobuf => protobuf::compile(text, &schema.resolved_references).map(Compiled::Protobuf),
    }
}

/// Why one value could not be decoded (the source adds where it was).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeFailure(pub String);

/// Decodes registry-framed values to JSON text. Schemas are cached by id
/// (compiled once); an id whose lookup failed is retried at the next batch.
#[derive(Debug)]
pub struct ValueDecoder {
    format: ValueFormat,
    client: SchemaRegistryClient,
    compiled: HashMap<u32, std::result::Result<Arc<Compiled>, String>>,
    /// Ids that failed in this batch (not cached for ever: the registry may
    /// come back).
    failed: HashMap<u32, String>,
}

impl ValueDecoder {
    /// A decoder for `options.format` with its registry client; no I/O until the first value.
    pub fn new(options: &FormatOptions) -> Result<Self> {
        Ok(ValueDecoder {
            format: options.format,
            client: SchemaRegistryClient::new(options.registry.clone()).map_err(registry_config_error)?,
            compiled: HashMap::new(),
            failed: HashMap::new(),
        })
    }

    /// The value format decoded.
    pub fn format(&self) -> ValueFormat {
        self.format
    }

    /// Registry requests made so far.
    pub fn registry_requests(&self) -> u64 {
        self.client.requests()
    }

    /// Fetches the schemas of `values` not cached yet, one request per id.
    /// Failures are kept for [`Self::decode`] to report per value.
    ///
    /// Cancel safety: cancel safe; a dropped call keeps what it cached.
    pub async fn prepare<'a>(&mut self, values: impl Iterator<Item = &'a [u8]>) {
        self.failed.clear();
        let ids: BTreeSet<u32> = values
            .filter_map(|v| confluent::decode(v, false).ok().map(|f| f.schema_id))
            .filter(|id| !self.compiled.contains_key(id))
            .collect();
        for id in ids {
            match self.client.schema_by_id(id).await {
                Ok(s) => {
                    let c = compile(self.format, &s).map(Arc::new);
                    self.compiled.insert(id, c);
                }
                Err(e) => {
                    self.failed.insert(id, e.to_string());
                }
            }
        }
    }

    /// One value to JSON text; [`Self::prepare`] must have seen it.
    pub fn decode(&self, value: &[u8]) -> std::result::Result<String, DecodeFailure> {
        let frame =
            confluent::decode(value, self.format == ValueFormat::Protobuf).map_err(|e| DecodeFailure(e.to_string()))?;
        let id = frame.schema_id;
        let compiled = match self.compiled.get(&id) {
            Some(Ok(c)) => c,
            Some(Err(e)) => return Err(DecodeFailure(format!("schema id {id}: {e}"))),
            None => {
                let why = self.failed.get(&id).map_or("not fetched", String::as_str);
                return Err(DecodeFailure(why.to_owned()));
            }
        };
        match &**compiled {
            Compiled::Avro(s) => avro::decode(s, frame.payload),
            Compiled::JsonSchema(v) => json_schema::decode(v, frame.payload),
            Compiled::Protobuf(p) => protobuf::decode(p, &frame.message_indexes, frame.payload),
        }
        .map_err(|e| DecodeFailure(format!("schema id {id}: {e}")))
    }
}

/// Encodes JSON rows to framed values of the subject's schema.
#[derive(Debug)]
pub struct ValueEncoder {
    options: FormatOptions,
    subject: String,
    client: SchemaRegistryClient,
    resolved: Option<(u32, Arc<Compiled>)>,
    refused: Arc<AtomicU64>,
}

impl ValueEncoder {
    /// An encoder for `topic`'s subject (see [`FormatOptions::subject_for`]); the schema is fetched (or registered) at open.
    pub fn new(options: &FormatOptions, topic: &str) -> Result<Self> {
        Ok(ValueEncoder {
            subject: options.subject_for(topic),
            client: SchemaRegistryClient::new(options.registry.clone()).map_err(registry_config_error)?,
            options: options.clone(),
            resolved: None,
            refused: Arc::default(),
        })
    }

    /// The subject whose schema values are encoded with.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The schema id rows are framed with, once [`Self::prepare`]d.
    pub fn schema_id(&self) -> Option<u32> {
        self.resolved.as_ref().map(|(id, _)| *id)
    }

    /// Rows refused because they do not fit the schema.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Resolves the subject's schema: registers `schema_registry_value_schema`
    /// (auto-register), else takes the latest version. Done once; a later
    /// registry outage does not reach the sink.
    ///
    /// Cancel safety: cancel safe; nothing is kept until it completes.
    pub async fn prepare(&mut self) -> Result<()> {
        if self.resolved.is_some() {
            return Ok(());
        }
        let format = self.options.format;
        let schema = match (&self.options.value_schema, self.options.auto_register) {
            (Some(text), true) => {
                let id = self.client.register(&self.subject, format.schema_type(), text).await?;
                self.client
                    .schema_by_id(id)
                    .await
                    .unwrap_or_else(|_| Arc::new(RegisteredSchema::new(id, format.schema_type(), text.clone())))
            }
            _ => self.client.latest(&self.subject).await?,
        };
        let id = schema.id;
        let compiled = compile(format, &schema).map_err(|reason| ConnectorError::InvalidOption {
            option: "schema_registry_subject".into(),
            value: self.subject.clone(),
            expected: format!("a subject whose schema (id {id}) this sink can use: {reason}"),
        })?;
        tracing::info!(subject = %self.subject, id, format = format.name(), "sink value schema resolved");
        self.resolved = Some((id, Arc::new(compiled)));
        Ok(())
    }

    /// One JSON row → a framed value; `Err(reason)` when it does not fit
    /// (counted in [`Self::refused`]).
    pub fn encode(&self, json: &[u8]) -> std::result::Result<Vec<u8>, String> {
        let result = self.encode_inner(json);
        if result.is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn encode_inner(&self, json: &[u8]) -> std::result::Result<Vec<u8>, String> {
        let Some((id, compiled)) = &self.resolved else {
            return Err("the sink's schema is not resolved (open was not called)".into());
        };
        let text = std::str::from_utf8(json).map_err(|e| format!("not UTF-8: {e}"))?;
        let payload = match &**compiled {
            Compiled::Avro(s) => avro::encode(s, text)?,
            Compiled::JsonSchema(v) => json_schema::encode(v, text)?,
            Compiled::Protobuf(p) => protobuf::encode(p, text)?,
        };
        let indexes = matches!(&**compiled, Compiled::Protobuf(_)).then_some(&[0][..]);
        let mut out = Vec::with_capacity(payload.len() + confluent::HEADER_LEN + 1);
        confluent::encode(*id, indexes, &payload, &mut out);
        Ok(out)
    }

    /// Encodes the payload of every message in place; a message whose row
    /// does not fit is dropped, counted and logged at warn level.
    pub fn encode_messages(&self, topic: &str, messages: &mut Vec<super::record::KafkaMessage>) {
        messages.retain_mut(|m| {
            let Some(payload) = &m.payload else { return true };
            match self.encode(payload) {
                Ok(framed) => {
                    m.payload = Some(framed.into());
                    true
                }
                Err(reason) => {
                    tracing::warn!(topic, subject = %self.subject, reason = %reason, "sink refused a row that does not fit the schema");
                    false
                }
            }
        });
    }
}
