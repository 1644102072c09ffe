//! The factory registry: names → builders, and [`install`], which
//! registers the Kafka factories of the spec.
//!
//! | name | builds |
//! |---|---|
//! | `kafka_message_source` | [`KafkaSource`](super::KafkaSource) of [`KafkaMessage`] |
//! | `kafka_text_source`, `kafka_source_string` | [`TextKafkaSource`] (one builder) |
//! | `kafka_message_sink` | [`KafkaSink`](super::KafkaSink) of [`KafkaMessage`] |
//! | `kafka_text_sink`, `kafka_sink_string` | [`TextKafkaSink`] (one builder) |
//! | `kafka_upsert_sink_string` | [`UpsertSink`](super::UpsertSink) |
//! | `kafka_2pc_sink_string` | [`TwoPhaseCommitSink`](super::TwoPhaseCommitSink) (transactional id per subtask) |
//!
//! Builders parse and validate every option (and refuse insecure or
//! unsupported configurations) without touching the network: I/O starts at
//! `open`. Every factory takes `backend = native | rdkafka`
//! ([`super::selected`]); `rdkafka` in a binary built without the cargo
//! feature is a build error naming the feature.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{closest, ConnectorError, Result};
use super::options::{self, FactoryKind};
use super::record::{KafkaMessage, Text};
use super::security::is_secret_option;
use super::selected;
use super::sink::TextKafkaSink;
use super::source::TextKafkaSource;
use super::{Sink, Source};

/// What a builder reads: string parameters plus where the operator sits
/// and, for a checkpointed job, the engine's checkpoint directory and job id
/// (a 2PC sink keeps its receipts under
/// `<checkpoint_dir>/_jobs/<job_id>/receipts`).
#[derive(Clone)]
pub struct BuildContext {
    params: BTreeMap<String, String>,
    subtask_index: u32,
    parallelism: u32,
    checkpoint: Option<(PathBuf, String)>,
}

impl fmt::Debug for BuildContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Params<'a>(&'a BTreeMap<String, String>);
        impl fmt::Debug for Params<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut m = f.debug_map();
                for (k, v) in self.0 {
                    if is_secret_option(k) {
                        m.entry(k, &"***");
                    } else {
                        m.entry(k, v);
                    }
                }
                m.finish()
            }
        }
        f.debug_struct("BuildContext")
            .field("params", &Params(&self.params))
            .field("subtask_index", &self.subtask_index)
            .field("parallelism", &self.parallelism)
            .field("checkpoint", &self.checkpoint)
            .finish()
    }
}

impl Default for BuildContext {
    /// No parameters, a standalone operator (subtask 0 of 1).
    fn default() -> Self {
        BuildContext::new(std::iter::empty::<(String, String)>())
    }
}

impl BuildContext {
    /// Parameters for a standalone operator (subtask 0 of 1).
    pub fn new<K: Into<String>, V: Into<String>>(params: impl IntoIterator<Item = (K, V)>) -> Self {
        BuildContext {
            params: params.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
            subtask_index: 0,
            parallelism: 1,
            checkpoint: None,
        }
    }

    /// The engine's checkpoint directory and this job's id (one path
    /// component: no `/`, not `.` or `..`; checked at build).
    pub fn with_checkpoint(mut self, checkpoint_dir: impl Into<PathBuf>, job_id: impl Into<String>) -> Self {
        self.checkpoint = Some((checkpoint_dir.into(), job_id.into()));
        self
    }

    /// The engine's checkpoint directory, when one was given.
    pub fn checkpoint_dir(&self) -> Option<&Path> {
        self.checkpoint.as_ref().map(|(d, _)| d.as_path())
    }

    /// This job's id, when a checkpoint directory was given.
    pub fn job_id(&self) -> Option<&str> {
        self.checkpoint.as_ref().map(|(_, j)| j.as_str())
    }

    /// The same parameters for subtask `index` of `parallelism`.
    pub fn with_subtask(mut self, index: u32, parallelism: u32) -> Self {
        self.subtask_index = index;
        self.parallelism = parallelism;
        self
    }

    /// Sets one parameter.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.params.insert(key.into(), value.into());
        self
    }

    /// Every parameter, by name.
    pub fn params(&self) -> &BTreeMap<String, String> {
        &self.params
    }

    /// The parameter `key`, if set.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }

    /// The subtask this operator runs as (0-based).
    pub fn subtask_index(&self) -> u32 {
        self.subtask_index
    }

    /// How many subtasks run this operator.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }
}

/// A built operator, by record shape.
pub enum Operator {
    /// A source of full records.
    MessageSource(Box<dyn Source<Item = KafkaMessage>>),
    /// A source of UTF-8 text values (the string channel).
    TextSource(Box<dyn Source<Item = Text>>),
    /// A sink of full records.
    MessageSink(Box<dyn Sink<Item = KafkaMessage>>),
    /// A sink of text values (the string channel).
    TextSink(Box<dyn Sink<Item = Text>>),
}

impl fmt::Debug for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.shape())
    }
}

impl Operator {
    /// "message source", "text sink", …
    pub fn shape(&self) -> &'static str {
        match self {
            Operator::MessageSource(_) => "message source",
            Operator::TextSource(_) => "text source",
            Operator::MessageSink(_) => "message sink",
            Operator::TextSink(_) => "text sink",
        }
    }

    fn wrong(self, factory: &str, expected: &'static str) -> ConnectorError {
        ConnectorError::WrongOperatorKind {
            factory: factory.to_owned(),
            expected,
            actual: self.shape(),
        }
    }

    /// The message source, or [`ConnectorError::WrongOperatorKind`] naming `factory`.
    pub fn into_message_source(self, factory: &str) -> Result<Box<dyn Source<Item = KafkaMessage>>> {
        match self {
            Operator::MessageSource(s) => Ok(s),
            other => Err(other.wrong(factory, "message source")),
        }
    }

    /// The text source, or [`ConnectorError::WrongOperatorKind`] naming `factory`.
    pub fn into_text_source(self, factory: &str) -> Result<Box<dyn Source<Item = Text>>> {
        match self {
            Operator::TextSource(s) => Ok(s),
            other => Err(other.wrong(factory, "text source")),
        }
    }

    /// The message sink, or [`ConnectorError::WrongOperatorKind`] naming `factory`.
    pub fn into_message_sink(self, factory: &str) -> Result<Box<dyn Sink<Item = KafkaMessage>>> {
        match self {
            Operator::MessageSink(s) => Ok(s),
            other => Err(other.wrong(factory, "message sink")),
        }
    }

    /// The text sink, or [`ConnectorError::WrongOperatorKind`] naming `factory`.
    pub fn into_text_sink(self, factory: &str) -> Result<Box<dyn Sink<Item = Text>>> {
        match self {
            Operator::TextSink(s) => Ok(s),
            other => Err(other.wrong(factory, "text sink")),
        }
    }
}

/// A builder function.
pub type BuildFn = fn(&BuildContext) -> Result<Operator>;

/// One factory: what it builds and how. Aliases share the same `Arc`.
#[derive(Debug)]
pub struct Factory {
    /// What the factory builds.
    pub kind: FactoryKind,
    build: BuildFn,
}

impl Factory {
    /// A factory of `kind` building with `build`.
    pub fn new(kind: FactoryKind, build: BuildFn) -> Arc<Factory> {
        Arc::new(Factory { kind, build })
    }

    /// Builds an operator from `ctx` (every option validated before any I/O).
    pub fn build(&self, ctx: &BuildContext) -> Result<Operator> {
        (self.build)(ctx)
    }
}

/// Factories by name.
#[derive(Debug, Default)]
pub struct Registry {
    factories: BTreeMap<String, Arc<Factory>>,
}

impl Registry {
    /// An empty registry (see [`install`] for the seven Kafka factories).
    pub fn new() -> Self {
        Registry::default()
    }

    /// Registers `factory` under `name`; a name is registered once.
    pub fn register(&mut self, name: &str, factory: Arc<Factory>) -> Result<()> {
        if self.factories.contains_key(name) {
            return Err(ConnectorError::DuplicateFactory { name: name.to_owned() });
        }
        self.factories.insert(name.to_owned(), factory);
        Ok(())
    }

    /// The factory registered under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Factory>> {
        self.factories.get(name).cloned()
    }

    /// Every registered name (aliases included), in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    /// Builds the operator `name` makes from `ctx`.
    pub fn build(&self, name: &str, ctx: &BuildContext) -> Result<Operator> {
        match self.factories.get(name) {
            Some(f) => f.build(ctx),
            None => Err(ConnectorError::UnknownFactory {
                name: name.to_owned(),
                suggestion: closest(name, self.names()).map(str::to_owned),
            }),
        }
    }
}

// Each builder parses the options (which refuses `backend = 'rdkafka'`
// without the cargo feature), then builds on the selected backend.

fn build_message_source(ctx: &BuildContext) -> Result<Operator> {
    let o = options::parse_source(
        FactoryKind::MessageSource,
        ctx.params(),
        ctx.subtask_index(),
        ctx.parallelism(),
    )?;
    Ok(Operator::MessageSource(Box::new(selected::kafka_source(o)?)))
}

fn build_text_source(ctx: &BuildContext) -> Result<Operator> {
    let o = options::parse_source(
        FactoryKind::TextSource,
        ctx.params(),
        ctx.subtask_index(),
        ctx.parallelism(),
    )?;
    Ok(Operator::TextSource(Box::new(TextKafkaSource::new(
        selected::kafka_source(o)?,
    ))))
}

fn build_message_sink(ctx: &BuildContext) -> Result<Operator> {
    let mut o = options::parse_sink(FactoryKind::MessageSink, ctx.params())?;
    o.subtask_index = ctx.subtask_index();
    Ok(Operator::MessageSink(Box::new(selected::kafka_sink(o)?)))
}

fn build_text_sink(ctx: &BuildContext) -> Result<Operator> {
    let mut o = options::parse_sink(FactoryKind::TextSink, ctx.params())?;
    o.subtask_index = ctx.subtask_index();
    Ok(Operator::TextSink(Box::new(TextKafkaSink::new(selected::kafka_sink(
        o,
    )?))))
}

fn build_upsert_sink(ctx: &BuildContext) -> Result<Operator> {
    let mut o = options::parse_upsert(ctx.params())?;
    o.sink.subtask_index = ctx.subtask_index();
    Ok(Operator::TextSink(Box::new(selected::upsert_sink(o)?)))
}

fn build_two_phase_commit_sink(ctx: &BuildContext) -> Result<Operator> {
    let mut o = options::parse_two_phase_commit(ctx.params(), ctx.subtask_index(), ctx.parallelism())?;
    if o.receipt_dir.is_none() {
        match &ctx.checkpoint {
            Some((dir, job_id)) => {
                if job_id.is_empty() || job_id.contains(['/', '\\', '\0']) || job_id == "." || job_id == ".." {
                    return Err(ConnectorError::invalid(
                        "job_id",
                        job_id.clone(),
                        "one path component (the build context's job id names <checkpoint_dir>/_jobs/<job_id>)",
                    ));
                }
                o.receipt_dir = Some(super::checkpoint::receipt_dir(dir, job_id));
            }
            None if o.receipts_in_memory => {}
            None => {
                return Err(ConnectorError::invalid(
                    "receipt_dir",
                    "(none)",
                    "a directory for commit receipts: give the build context a checkpoint directory and job id \
                     (receipts go to <checkpoint_dir>/_jobs/<job_id>/receipts), set receipt_dir, or opt in to \
                     receipts lost with the process with receipts_in_memory = 'true'",
                ));
            }
        }
    }
    Ok(Operator::TextSink(Box::new(selected::two_phase_commit_sink(o)?)))
}

/// The names [`install`] registers.
pub const FACTORY_NAMES: &[&str] = &[
    "kafka_message_source",
    "kafka_text_source",
    "kafka_source_string",
    "kafka_message_sink",
    "kafka_text_sink",
    "kafka_sink_string",
    "kafka_upsert_sink_string",
    "kafka_2pc_sink_string",
];

/// Registers the Kafka factories (spec: `clink::kafka::install(registry)`).
pub fn install(registry: &mut Registry) -> Result<()> {
    let message_source = Factory::new(FactoryKind::MessageSource, build_message_source);
    let text_source = Factory::new(FactoryKind::TextSource, build_text_source);
    let message_sink = Factory::new(FactoryKind::MessageSink, build_message_sink);
    let text_sink = Factory::new(FactoryKind::TextSink, build_text_sink);
    let upsert_sink = Factory::new(FactoryKind::UpsertSink, build_upsert_sink);
    registry.register("kafka_message_source", message_source)?;
    registry.register("kafka_text_source", text_source.clone())?;
    registry.register("kafka_source_string", text_source)?;
    registry.register("kafka_message_sink", message_sink)?;
    registry.register("kafka_text_sink", text_sink.clone())?;
    registry.register("kafka_sink_string", text_sink)?;
    registry.register("kafka_upsert_sink_string", upsert_sink)?;
    registry.register(
        "kafka_2pc_sink_string",
        Factory::new(FactoryKind::TwoPhaseCommitSink, build_two_phase_commit_sink),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_share_one_builder_and_2pc_is_registered() {
        let mut r = Registry::new();
        install(&mut r).unwrap();
        let names: Vec<&str> = r.names().collect();
        let mut expected = FACTORY_NAMES.to_vec();
        expected.sort();
        assert_eq!(names, expected);
        assert!(Arc::ptr_eq(
            &r.get("kafka_text_source").unwrap(),
            &r.get("kafka_source_string").unwrap()
        ));
        assert!(Arc::ptr_eq(
            &r.get("kafka_text_sink").unwrap(),
            &r.get("kafka_sink_string").unwrap()
        ));
        let e = r.build("kafka_2pc_sink_string", &BuildContext::default()).unwrap_err();
        assert!(matches!(e, ConnectorError::MissingOption { .. }), "{e}");
        let ctx = BuildContext::new([("brokers", "h:1"), ("topic", "t"), ("transactional_id", "tx")])
            .with_subtask(1, 2)
            .with_checkpoint("/tmp/clink-ckpt", "job-1");
        let Operator::TextSink(sink) = r.build("kafka_2pc_sink_string", &ctx).unwrap() else {
            panic!("the 2PC sink is a text sink");
        };
        let caps = sink.capabilities();
        assert!(
            caps.two_phase && !caps.commit_recoverable && caps.stages_state,
            "{caps:?}"
        );
        assert_eq!(caps.delivery, super::super::DeliveryGuarantee::ExactlyOnce);
        assert!(install(&mut r).is_err(), "a second install is a duplicate");
    }

    #[test]
    fn a_2pc_sink_needs_a_place_for_receipts_or_an_explicit_opt_in() {
        let mut r = Registry::new();
        install(&mut r).unwrap();
        let params = [("brokers", "h:1"), ("topic", "t"), ("transactional_id", "tx")];
        let e = r
            .build("kafka_2pc_sink_string", &BuildContext::new(params))
            .map(drop)
            .unwrap_err();
        assert_eq!(e.option(), Some("receipt_dir"), "{e}");
        assert!(
            e.to_string().contains("receipts_in_memory") && e.to_string().contains("_jobs/<job_id>/receipts"),
            "{e}"
        );
        for bad in ["", "..", "a/b"] {
            let e = r
                .build(
                    "kafka_2pc_sink_string",
                    &BuildContext::new(params).with_checkpoint("/tmp/c", bad),
                )
                .map(drop)
                .unwrap_err();
            assert_eq!(e.option(), Some("job_id"), "{bad:?}: {e}");
        }
        let mut opted = BuildContext::new(params);
        opted.set("receipts_in_memory", "true");
        r.build("kafka_2pc_sink_string", &opted)
            .expect("memory receipts by opt-in");
        let mut own = BuildContext::new(params);
        own.set("receipt_dir", "/tmp/elsewhere");
        r.build("kafka_2pc_sink_string", &own).expect("receipt_dir alone");
        let ctx = BuildContext::new(params).with_checkpoint("/tmp/c", "job-1");
        assert!(format!("{ctx:?}").contains("job-1"));
        r.build("kafka_2pc_sink_string", &ctx)
            .expect("receipts under the checkpoint dir");
    }

    #[test]
    fn build_context_debug_hides_secrets() {
        let ctx = BuildContext::new([("sasl_password", "canary-1"), ("kafka.ssl.key.password", "canary-2")]);
        let d = format!("{ctx:?}");
        assert!(!d.contains("canary"), "{d}");
    }
}
