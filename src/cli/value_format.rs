//! `--value-format avro|protobuf|json-schema --schema-registry-url URL` for `produce` and
//! `consume`: JSON lines in, registry-framed values out, and back, through
//! the connector's own encoder and decoder (`connector::format`).

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use clink_kafka::connector::format::{FormatOptions, ValueDecoder, ValueEncoder, ValueFormat};
use clink_kafka::connector::{GroupRecord, KafkaMessage};

/// The registry flags.
#[derive(Args, Debug, Default)]
pub struct ValueFormatArgs {
    /// Registry-framed values: avro, protobuf or json-schema. Values are
    /// JSON text on stdin / stdout (protobuf: the schema's first message).
    #[arg(long, value_name = "FORMAT")]
    pub value_format: Option<String>,
    /// The Confluent-compatible registry API, e.g.
    /// http://127.0.0.1:18081/apis/ccompat/v7.
    #[arg(long, value_name = "URL", env = "CLINK_SCHEMA_REGISTRY_URL")]
    pub schema_registry_url: Option<String>,
    /// produce: the subject (default <topic>-value).
    #[arg(long, value_name = "SUBJECT")]
    pub schema_registry_subject: Option<String>,
    /// produce: register this schema file under the subject (else the
    /// subject's latest version is used).
    #[arg(long, value_name = "FILE")]
    pub value_schema_file: Option<std::path::PathBuf>,
    /// A PEM CA file to trust for an https registry.
    #[arg(long, value_name = "FILE")]
    pub schema_registry_ca: Option<std::path::PathBuf>,
}

impl ValueFormatArgs {
    fn options(&self) -> anyhow::Result<Option<FormatOptions>> {
        let Some(f) = &self.value_format else {
            if self.schema_registry_subject.is_some() || self.value_schema_file.is_some() {
                anyhow::bail!("--schema-registry-subject and --value-schema-file need --value-format");
            }
            return Ok(None);
        };
        let Some(format) = ValueFormat::parse("--value-format", f)? else {
            return Ok(None);
        };
        let url = self
            .schema_registry_url
            .clone()
            .context("--value-format needs --schema-registry-url")?;
        let mut o = FormatOptions::new(format, url);
        o.subject = self.schema_registry_subject.clone();
        if let Some(path) = &self.value_schema_file {
            o.value_schema =
                Some(std::fs::read_to_string(path).with_context(|| format!("--value-schema-file {}", path.display()))?);
            o.auto_register = true;
        }
        o.registry.tls.ca_file = self.schema_registry_ca.clone();
        Ok(Some(o))
    }

    /// The encoder for `topic`, its schema resolved; `None` without `--value-format`.
    pub async fn encoder(&self, topic: &str) -> anyhow::Result<Option<ValueEncoder>> {
        let Some(o) = self.options()? else { return Ok(None) };
        let mut e = ValueEncoder::new(&o, topic)?;
        e.prepare().await.context("resolving the value schema")?;
        Ok(Some(e))
    }

    pub fn decoder(&self) -> anyhow::Result<Option<ValueDecoder>> {
        match self.options()? {
            Some(o) => Ok(Some(ValueDecoder::new(&o)?)),
            None => Ok(None),
        }
    }

    pub fn is_set(&self) -> bool {
        self.value_format.is_some()
    }
}

/// Encodes one stdin line's value; the error names the line.
pub fn encode_line(encoder: &ValueEncoder, value: Option<Bytes>, line_no: u64) -> anyhow::Result<Option<Bytes>> {
    match value {
        None => Ok(None),
        Some(v) => encoder
            .encode(&v)
            .map(|framed| Some(Bytes::from(framed)))
            .map_err(|reason| anyhow::anyhow!("stdin line {line_no}: {reason}")),
    }
}

/// A consumed record as `decode_records` sees it: its message, and its
/// topic (a record of a one-topic consumer carries none: `single` is it).
pub trait Consumed {
    /// The message, whose value is replaced.
    fn message(&mut self) -> &mut KafkaMessage;
    /// The value.
    fn value(&self) -> Option<&[u8]>;
    /// The record's topic.
    fn topic<'a>(&'a self, single: &'a str) -> &'a str;
}

impl Consumed for KafkaMessage {
    fn message(&mut self) -> &mut KafkaMessage {
        self
    }
    fn value(&self) -> Option<&[u8]> {
        self.payload.as_deref()
    }
    fn topic<'a>(&'a self, single: &'a str) -> &'a str {
        single
    }
}

impl Consumed for GroupRecord {
    fn message(&mut self) -> &mut KafkaMessage {
        &mut self.message
    }
    fn value(&self) -> Option<&[u8]> {
        self.message.payload.as_deref()
    }
    fn topic<'a>(&'a self, _: &'a str) -> &'a str {
        &self.topic
    }
}

/// Replaces every value of `records` by its JSON text. A value that cannot
/// be decoded is, with `skip`, a warning naming the record, and the record
/// is left out (the count of those is returned); else an error naming it,
/// and `records` keeps only the records before it (to print them first).
pub async fn decode_records<R: Consumed>(
    decoder: &mut ValueDecoder,
    records: &mut Vec<R>,
    single_topic: &str,
    skip: bool,
) -> anyhow::Result<u64> {
    decoder.prepare(records.iter().filter_map(|r| r.value())).await;
    let mut skipped = 0;
    let mut failure = None;
    records.retain_mut(|r| {
        if failure.is_some() {
            return false;
        }
        let topic = r.topic(single_topic).to_owned();
        let m = r.message();
        let Some(v) = &m.payload else { return true };
        match decoder.decode(v) {
            Ok(json) => {
                m.payload = Some(Bytes::from(json));
                true
            }
            Err(f) if skip => {
                tracing::warn!(
                    topic = %topic,
                    partition = m.partition,
                    offset = m.offset,
                    format = decoder.format().name(),
                    reason = %f.0,
                    "--decode-error skip: skipping a value that cannot be decoded"
                );
                skipped += 1;
                false
            }
            Err(f) => {
                failure = Some(anyhow::anyhow!(
                    "the value at {}[{}] offset {} cannot be decoded as {}: {} \
                     (--decode-error skip leaves such values out)",
                    topic,
                    m.partition,
                    m.offset,
                    decoder.format().name(),
                    f.0
                ));
                false
            }
        }
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(skipped),
    }
}
