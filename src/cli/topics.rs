//! `clink-kafka topics list|describe|create|delete` and `clink-kafka
//! metadata` (kcat -L's view: brokers, controller, topics, partitions with
//! leader, replicas and in-sync replicas), as text or `--format json`, over
//! [`Admin`]. A broker's refusal is told in the user's words (the topic
//! exists, does not exist, the partition count or replication factor is
//! invalid) with the broker's own message kept below it.

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use clink_kafka::client::{Admin, Cluster, ClusterMetadata, NewTopic, TopicDescription};
use serde_json::{json, Value};

use super::{parse_header, ConnectArgs};

/// `--format` of the admin commands.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Lines for people.
    Text,
    /// One JSON document on stdout.
    Json,
}

/// Options of `topics`.
#[derive(Args, Debug)]
pub struct TopicsArgs {
    #[command(subcommand)]
    pub command: TopicsCommand,
}

/// The `topics` subcommands.
#[derive(Subcommand, Debug)]
pub enum TopicsCommand {
    /// Topic names, one per line (JSON: names with partition counts).
    List(ListArgs),
    /// Each partition of the topics: leader, replicas, in-sync replicas.
    Describe(DescribeArgs),
    /// Create a topic (CreateTopics) and wait until every partition has a leader.
    Create(CreateArgs),
    /// Delete topics (DeleteTopics) and wait until metadata no longer shows them.
    Delete(DeleteArgs),
}

/// Options of `topics list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Include internal topics (__consumer_offsets, __transaction_state, …).
    #[arg(long)]
    pub internal: bool,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Options of `topics describe`.
#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Topics to describe.
    #[arg(value_name = "TOPIC", required = true)]
    pub topics: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Options of `topics create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The topic to create.
    #[arg(value_name = "TOPIC")]
    pub topic: String,
    /// Partitions (default: the broker's num.partitions).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
    pub partitions: Option<i32>,
    /// Replicas of each partition (default: the broker's default.replication.factor).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i16).range(1..))]
    pub replication_factor: Option<i16>,
    /// A topic config key=value, e.g. cleanup.policy=compact (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_header)]
    pub configs: Vec<(String, String)>,
}

/// Options of `topics delete`.
#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Topics to delete.
    #[arg(value_name = "TOPIC", required = true)]
    pub topics: Vec<String>,
}

/// Options of `metadata`.
#[derive(Args, Debug)]
pub struct MetadataArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Only this topic (repeatable; default: every topic, internal ones included).
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

async fn admin(connect: &ConnectArgs) -> anyhow::Result<Admin> {
    let cluster = Cluster::connect(connect.client_config()?)
        .await
        .context("connecting to the cluster")?;
    Ok(Admin::new(cluster))
}

/// Runs `topics`.
pub async fn run(args: TopicsArgs) -> anyhow::Result<()> {
    match args.command {
        TopicsCommand::List(a) => list(a).await,
        TopicsCommand::Describe(a) => describe(a).await,
        TopicsCommand::Create(a) => create(a).await,
        TopicsCommand::Delete(a) => delete(a).await,
    }
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let md = admin(&args.connect).await?.describe_topics(None).await?;
    let topics = md.topics.iter().filter(|t| args.internal || !t.internal);
    match args.format {
        Format::Text => {
            for t in topics {
                println!("{}", t.name);
            }
        }
        Format::Json => {
            let rows: Vec<Value> = topics
                .map(|t| json!({"name": t.name, "partitions": t.partitions.len(), "internal": t.internal}))
                .collect();
            println!("{}", Value::Array(rows));
        }
    }
    Ok(())
}

async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let names: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    let md = admin(&args.connect)
        .await?
        .describe_topics(Some(&names))
        .await
        .map_err(|e| explain(e, "describing"))?;
    match args.format {
        Format::Text => md.topics.iter().for_each(print_topic),
        Format::Json => println!(
            "{}",
            json!({"topics": md.topics.iter().map(topic_json).collect::<Vec<_>>()})
        ),
    }
    Ok(())
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let mut topic = NewTopic::new(
        &args.topic,
        args.partitions.unwrap_or(-1),
        args.replication_factor.unwrap_or(-1),
    );
    topic.configs = args.configs.clone();
    admin(&args.connect)
        .await?
        .create_topics(&[topic])
        .await
        .map_err(|e| explain(e, "creating"))?;
    eprintln!("created topic {}", args.topic);
    Ok(())
}

async fn delete(args: DeleteArgs) -> anyhow::Result<()> {
    let names: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    admin(&args.connect)
        .await?
        .delete_topics(&names)
        .await
        .map_err(|e| explain(e, "deleting"))?;
    eprintln!("deleted topic(s) {}", names.join(", "));
    Ok(())
}

/// Runs `metadata`.
pub async fn metadata(args: MetadataArgs) -> anyhow::Result<()> {
    let names: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    let only = (!names.is_empty()).then_some(names.as_slice());
    let md = admin(&args.connect)
        .await?
        .describe_topics(only)
        .await
        .map_err(|e| explain(e, "describing"))?;
    match args.format {
        Format::Text => print_metadata(&md),
        Format::Json => println!("{}", metadata_json(&md)),
    }
    Ok(())
}

/// The broker's refusal of `doing` (creating, describing, deleting) a
/// topic, led by what it means for the user.
fn explain(e: clink_kafka::Error, doing: &str) -> anyhow::Error {
    let (meaning, topic) = match &e {
        clink_kafka::Error::Kafka {
            code,
            topic: Some(topic),
            ..
        } => {
            let meaning = match code.name() {
                "TOPIC_ALREADY_EXISTS" => "already exists",
                "UNKNOWN_TOPIC_OR_PARTITION" => "does not exist",
                "INVALID_PARTITIONS" => "cannot have that many partitions (--partitions)",
                "INVALID_REPLICATION_FACTOR" => "cannot have that replication factor (--replication-factor)",
                "INVALID_CONFIG" => "cannot have that config (--config)",
                "INVALID_TOPIC_EXCEPTION" => "is not a valid topic name",
                _ => "was refused",
            };
            (meaning, topic.clone())
        }
        _ => return anyhow::Error::new(e).context(format!("{doing} topics")),
    };
    anyhow::Error::new(e).context(format!("{doing} topic {topic:?}: it {meaning}"))
}

fn ids(nodes: &[i32]) -> String {
    nodes.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn print_topic(t: &TopicDescription) {
    let internal = if t.internal { " (internal)" } else { "" };
    let error = if t.error.is_ok() {
        String::new()
    } else {
        format!(": {}", t.error)
    };
    println!(
        "  topic \"{}\" with {} partitions{internal}{error}:",
        t.name,
        t.partitions.len()
    );
    for p in &t.partitions {
        let error = if p.error.is_ok() {
            String::new()
        } else {
            format!(", {}", p.error)
        };
        let offline = if p.offline_replicas.is_empty() {
            String::new()
        } else {
            format!(", offline: {}", ids(&p.offline_replicas))
        };
        println!(
            "    partition {}, leader {}, epoch {}, replicas: {}, isrs: {}{offline}{error}",
            p.partition,
            p.leader,
            p.leader_epoch,
            ids(&p.replicas),
            ids(&p.isr)
        );
    }
}

fn print_metadata(md: &ClusterMetadata) {
    println!(
        "Metadata of cluster {} (controller {}):",
        md.cluster_id.as_deref().unwrap_or("-"),
        md.controller_id
    );
    println!(" {} brokers:", md.brokers.len());
    for b in &md.brokers {
        let controller = if b.node_id == md.controller_id {
            " (controller)"
        } else {
            ""
        };
        let rack = b.rack.as_deref().map(|r| format!(", rack {r}")).unwrap_or_default();
        println!("  broker {} at {}:{}{rack}{controller}", b.node_id, b.host, b.port);
    }
    println!(" {} topics:", md.topics.len());
    md.topics.iter().for_each(print_topic);
}

fn topic_json(t: &TopicDescription) -> Value {
    json!({
        "name": t.name,
        "internal": t.internal,
        "error": (!t.error.is_ok()).then(|| t.error.name()),
        "partitions": t.partitions.iter().map(|p| json!({
            "partition": p.partition,
            "leader": p.leader,
            "leader_epoch": p.leader_epoch,
            "replicas": p.replicas,
            "isr": p.isr,
            "offline_replicas": p.offline_replicas,
            "error": (!p.error.is_ok()).then(|| p.error.name()),
        })).collect::<Vec<_>>(),
    })
}

fn metadata_json(md: &ClusterMetadata) -> Value {
    json!({
        "cluster_id": md.cluster_id,
        "controller_id": md.controller_id,
        "brokers": md.brokers.iter().map(|b| json!({
            "id": b.node_id,
            "host": b.host,
            "port": b.port,
            "rack": b.rack,
        })).collect::<Vec<_>>(),
        "topics": md.topics.iter().map(topic_json).collect::<Vec<_>>(),
    })
}
