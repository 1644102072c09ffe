//! `clink-kafka groups list|describe|delete|reset-offsets`, what
//! `kafka-consumer-groups.sh` does, as text or `--format json`, over the
//! group administration of [`Admin`] (`src/client/group_admin.rs`).

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use clink_kafka::client::{
    parse_datetime, Admin, Cluster, GroupDescription, GroupListing, GroupType, ListGroupsFilter, OffsetReset,
    PartitionLag, PlannedOffset, ResetScope,
};
use serde_json::{json, Value};

use super::topics::Format;
use super::ConnectArgs;

/// Options of `groups`.
#[derive(Args, Debug)]
pub struct GroupsArgs {
    #[command(subcommand)]
    pub command: GroupsCommand,
}

/// The `groups` subcommands.
#[derive(Subcommand, Debug)]
pub enum GroupsCommand {
    /// Consumer groups of every broker, with their type (classic, consumer) and state.
    List(ListArgs),
    /// A group's state, members and assignment, committed offsets, log end offsets and lag.
    Describe(DescribeArgs),
    /// Delete an inactive group (DeleteGroups); a group with members is refused.
    Delete(DeleteArgs),
    /// Reset an inactive group's committed offsets; prints the plan unless --execute.
    ResetOffsets(ResetArgs),
}

/// Options of `groups list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Only groups in this state, e.g. Stable, Empty (repeatable; ListGroups v4).
    #[arg(long = "state", value_name = "STATE")]
    pub states: Vec<String>,
    /// Only groups of this type: classic or consumer (repeatable; ListGroups v5).
    #[arg(long = "type", value_name = "TYPE", value_parser = parse_type)]
    pub types: Vec<GroupType>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Options of `groups describe`.
#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The group id.
    #[arg(value_name = "GROUP")]
    pub group: String,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Options of `groups delete`.
#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The group id.
    #[arg(value_name = "GROUP")]
    pub group: String,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Where `reset-offsets` moves the offsets: exactly one.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct ResetMode {
    /// To the log start offset.
    #[arg(long)]
    pub to_earliest: bool,
    /// To the log end offset.
    #[arg(long)]
    pub to_latest: bool,
    /// To this offset (clamped to the log's start and end).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub to_offset: Option<i64>,
    /// The committed offset plus N, negative to go back (clamped to the log's start and end).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub shift_by: Option<i64>,
    /// To the first offset at or after this time: YYYY-MM-DDTHH:mm:SS.sss,
    /// optional zone Z, +hh, +hhmm or +hh:mm (none: UTC), e.g. 2024-05-01T12:00:00.000.
    #[arg(long, value_name = "DATETIME")]
    pub to_datetime: Option<String>,
}

/// Which partitions `reset-offsets` resets: exactly one.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct ResetTopics {
    /// A topic (all its partitions) or topic:p,p,… (repeatable).
    #[arg(long = "topic", value_name = "TOPIC[:P,..]")]
    pub topics: Vec<String>,
    /// Every partition the group has a committed offset for.
    #[arg(long)]
    pub all_topics: bool,
}

/// Options of `groups reset-offsets`.
#[derive(Args, Debug)]
pub struct ResetArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The group id.
    #[arg(value_name = "GROUP")]
    pub group: String,
    #[command(flatten)]
    pub scope: ResetTopics,
    #[command(flatten)]
    pub mode: ResetMode,
    /// Commit the new offsets (default: only print the plan).
    #[arg(long, conflicts_with = "dry_run")]
    pub execute: bool,
    /// Only print the plan (the default).
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

fn parse_type(s: &str) -> Result<GroupType, String> {
    match GroupType::from_name(s) {
        GroupType::Other(_) => Err(format!("{s:?} is not a group type; allowed: classic, consumer")),
        t => Ok(t),
    }
}

/// Parses one `--topic`: `t` or `t:0,1`.
pub fn parse_topic_arg(s: &str) -> anyhow::Result<(String, Option<Vec<i32>>)> {
    match s.split_once(':') {
        None if !s.is_empty() => Ok((s.to_owned(), None)),
        None => bail!("--topic: empty topic name"),
        Some((topic, parts)) => {
            if topic.is_empty() || parts.is_empty() {
                bail!("--topic {s:?}: expected TOPIC or TOPIC:P,P,… (e.g. orders:0,2)");
            }
            let partitions = parts
                .split(',')
                .map(|p| {
                    p.trim()
                        .parse::<i32>()
                        .ok()
                        .filter(|p| *p >= 0)
                        .with_context(|| format!("--topic {s:?}: partition {p:?} is not a number >= 0"))
                })
                .collect::<anyhow::Result<Vec<i32>>>()?;
            Ok((topic.to_owned(), Some(partitions)))
        }
    }
}

impl ResetMode {
    fn reset(&self) -> anyhow::Result<OffsetReset> {
        Ok(if self.to_earliest {
            OffsetReset::Earliest
        } else if self.to_latest {
            OffsetReset::Latest
        } else if let Some(n) = self.to_offset {
            OffsetReset::ToOffset(n)
        } else if let Some(n) = self.shift_by {
            OffsetReset::ShiftBy(n)
        } else if let Some(d) = &self.to_datetime {
            OffsetReset::ToTimestamp(parse_datetime(d).context("--to-datetime")?)
        } else {
            bail!("give one of --to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime")
        })
    }
}

async fn admin(connect: &ConnectArgs) -> anyhow::Result<Admin> {
    let cluster = Cluster::connect(connect.client_config()?)
        .await
        .context("connecting to the cluster")?;
    Ok(Admin::new(cluster))
}

/// Runs `groups`.
pub async fn run(args: GroupsArgs) -> anyhow::Result<()> {
    match args.command {
        GroupsCommand::List(a) => list(a).await,
        GroupsCommand::Describe(a) => describe(a).await,
        GroupsCommand::Delete(a) => delete(a).await,
        GroupsCommand::ResetOffsets(a) => reset_offsets(a).await,
    }
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let filter = ListGroupsFilter {
        states: args.states.clone(),
        types: args.types.clone(),
    };
    let groups = admin(&args.connect)
        .await?
        .list_groups(&filter)
        .await
        .context("listing groups (--state needs ListGroups v4, --type v5)")?;
    match args.format {
        Format::Text => print!("{}", list_text(&groups)),
        Format::Json => println!("{}", list_json(&groups)),
    }
    Ok(())
}

/// `groups list` as text: the Java tool's `--list --type --state` columns.
pub fn list_text(groups: &[GroupListing]) -> String {
    let width = groups.iter().map(|g| g.group_id.len()).max().unwrap_or(0).max(5);
    let mut out = format!("{:<width$} {:<10} {}\n", "GROUP", "TYPE", "STATE");
    for g in groups {
        out.push_str(&format!(
            "{:<width$} {:<10} {}\n",
            g.group_id,
            g.group_type.as_str(),
            g.state.as_deref().unwrap_or("-")
        ));
    }
    out
}

/// `groups list --format json`.
pub fn list_json(groups: &[GroupListing]) -> Value {
    Value::Array(
        groups
            .iter()
            .map(|g| {
                json!({
                    "group_id": g.group_id,
                    "type": g.group_type.as_str(),
                    "protocol_type": g.protocol_type,
                    "state": g.state,
                    "coordinator": g.coordinator,
                })
            })
            .collect(),
    )
}

async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let admin = admin(&args.connect).await?;
    let d = admin
        .describe_group(&args.group)
        .await
        .with_context(|| format!("describing group {:?}", args.group))?;
    if !d.exists() {
        bail!("group {:?} does not exist", args.group);
    }
    let lag = admin
        .group_lag(&d)
        .await
        .with_context(|| format!("reading the offsets of group {:?}", args.group))?;
    match args.format {
        Format::Text => print!("{}", describe_text(&d, &lag)),
        Format::Json => println!("{}", describe_json(&d, &lag)),
    }
    Ok(())
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn tps(tps: &[clink_kafka::client::TopicPartition]) -> String {
    if tps.is_empty() {
        return "-".into();
    }
    tps.iter()
        .map(|tp| format!("{}:{}", tp.topic, tp.partition))
        .collect::<Vec<_>>()
        .join(",")
}

/// `groups describe` as text: a summary, the members, then the Java tool's
/// offset table.
pub fn describe_text(d: &GroupDescription, lag: &[PartitionLag]) -> String {
    let mut out = format!(
        "group {:?}: type {}, state {}, assignor {}, coordinator {}, {} member(s)",
        d.group_id,
        d.group_type,
        d.state,
        if d.assignor.is_empty() { "-" } else { &d.assignor },
        d.coordinator,
        d.members.len()
    );
    if let (Some(g), Some(a)) = (d.group_epoch, d.assignment_epoch) {
        out.push_str(&format!(", group epoch {g}, assignment epoch {a}"));
    }
    out.push('\n');
    for m in &d.members {
        out.push_str(&format!(
            "  member {} client {} host {}",
            m.member_id, m.client_id, m.client_host
        ));
        if let Some(i) = &m.group_instance_id {
            out.push_str(&format!(" instance {i}"));
        }
        if let Some(e) = m.member_epoch {
            out.push_str(&format!(" epoch {e}"));
        }
        out.push_str(&format!(" assigned {}", tps(&m.assignment)));
        if let Some(e) = &m.protocol_error {
            out.push_str(&format!(" (unreadable protocol bytes: {e})"));
        }
        out.push('\n');
    }
    let topic_w = lag.iter().map(|r| r.topic.len()).max().unwrap_or(0).max(5);
    out.push_str(&format!(
        "\n{:<topic_w$} {:>9} {:>14} {:>14} {:>8}  {:<24} {:<16} CLIENT-ID\n",
        "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST"
    ));
    for r in lag {
        out.push_str(&format!(
            "{:<topic_w$} {:>9} {:>14} {:>14} {:>8}  {:<24} {:<16} {}\n",
            r.topic,
            r.partition,
            opt(r.committed),
            opt(r.log_end),
            opt(r.lag),
            r.member_id.as_deref().unwrap_or("-"),
            r.client_host.as_deref().unwrap_or("-"),
            r.client_id.as_deref().unwrap_or("-"),
        ));
    }
    out
}

/// `groups describe --format json`.
pub fn describe_json(d: &GroupDescription, lag: &[PartitionLag]) -> Value {
    let tps = |tps: &[clink_kafka::client::TopicPartition]| -> Value {
        tps.iter()
            .map(|tp| json!({"topic": tp.topic, "partition": tp.partition}))
            .collect()
    };
    json!({
        "group_id": d.group_id,
        "type": d.group_type.as_str(),
        "state": d.state,
        "protocol_type": d.protocol_type,
        "assignor": d.assignor,
        "group_epoch": d.group_epoch,
        "assignment_epoch": d.assignment_epoch,
        "coordinator": d.coordinator,
        "members": d.members.iter().map(|m| json!({
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "rack_id": m.rack_id,
            "member_epoch": m.member_epoch,
            "subscribed_topics": m.subscribed_topics,
            "subscribed_pattern": m.subscribed_pattern,
            "assignment": tps(&m.assignment),
            "target_assignment": m.target_assignment.as_deref().map(tps),
            "protocol_error": m.protocol_error,
        })).collect::<Vec<_>>(),
        "offsets": lag.iter().map(|r| json!({
            "topic": r.topic,
            "partition": r.partition,
            "committed": r.committed,
            "log_end": r.log_end,
            "lag": r.lag,
            "member_id": r.member_id,
            "client_id": r.client_id,
            "client_host": r.client_host,
        })).collect::<Vec<_>>(),
    })
}

async fn delete(args: DeleteArgs) -> anyhow::Result<()> {
    admin(&args.connect)
        .await?
        .delete_group(&args.group)
        .await
        .with_context(|| format!("deleting group {:?}", args.group))?;
    match args.format {
        Format::Text => println!("Deletion of group {:?} was successful.", args.group),
        Format::Json => println!("{}", json!({"group_id": args.group, "deleted": true})),
    }
    Ok(())
}

async fn reset_offsets(args: ResetArgs) -> anyhow::Result<()> {
    let reset = args.mode.reset()?;
    let scope = if args.scope.all_topics {
        ResetScope::AllTopics
    } else {
        ResetScope::Topics(
            args.scope
                .topics
                .iter()
                .map(|t| parse_topic_arg(t))
                .collect::<anyhow::Result<_>>()?,
        )
    };
    let admin = admin(&args.connect).await?;
    let plan = admin
        .plan_offset_reset(&args.group, &scope, reset)
        .await
        .with_context(|| format!("planning the offset reset of group {:?}", args.group))?;
    if args.execute {
        admin
            .execute_offset_reset(&args.group, &plan)
            .await
            .with_context(|| format!("committing the new offsets of group {:?}", args.group))?;
    }
    match args.format {
        Format::Text => {
            print!("{}", reset_text(&args.group, &plan));
            if !args.execute {
                eprintln!("dry run: nothing committed; add --execute to commit these offsets");
            }
        }
        Format::Json => println!("{}", reset_json(&args.group, &plan, args.execute)),
    }
    Ok(())
}

/// The plan as text: the Java tool's GROUP TOPIC PARTITION NEW-OFFSET table.
pub fn reset_text(group: &str, plan: &[PlannedOffset]) -> String {
    let group_w = group.len().max(15);
    let topic_w = plan.iter().map(|p| p.topic.len()).max().unwrap_or(0).max(15);
    let mut out = format!(
        "{:<group_w$} {:<topic_w$} {:<10} {:<14} NEW-OFFSET\n",
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET"
    );
    for p in plan {
        out.push_str(&format!(
            "{:<group_w$} {:<topic_w$} {:<10} {:<14} {}\n",
            group,
            p.topic,
            p.partition,
            opt(p.current),
            p.new_offset
        ));
    }
    out
}

/// The plan as JSON.
pub fn reset_json(group: &str, plan: &[PlannedOffset], executed: bool) -> Value {
    json!({
        "group_id": group,
        "executed": executed,
        "partitions": plan.iter().map(|p| json!({
            "topic": p.topic,
            "partition": p.partition,
            "current": p.current,
            "new_offset": p.new_offset,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use clink_kafka::client::{GroupMember, TopicPartition};

    use super::*;

    #[test]
    fn topic_args_parse_and_name_the_option() {
        assert_eq!(parse_topic_arg("t").unwrap(), ("t".into(), None));
        assert_eq!(parse_topic_arg("t:0,2").unwrap(), ("t".into(), Some(vec![0, 2])));
        for bad in ["", "t:", ":1", "t:x", "t:-1", "t:1,,2"] {
            let e = format!("{:#}", parse_topic_arg(bad).unwrap_err());
            assert!(e.contains("--topic"), "{bad:?}: {e}");
        }
    }

    fn description() -> (GroupDescription, Vec<PartitionLag>) {
        let d = GroupDescription {
            group_id: "g".into(),
            group_type: GroupType::Consumer,
            state: "Stable".into(),
            protocol_type: "consumer".into(),
            assignor: "uniform".into(),
            group_epoch: Some(3),
            assignment_epoch: Some(3),
            coordinator: 1,
            members: vec![GroupMember {
                member_id: "m1".into(),
                client_id: "c1".into(),
                client_host: "/127.0.0.1".into(),
                member_epoch: Some(3),
                subscribed_topics: vec!["t".into()],
                assignment: vec![TopicPartition::new("t", 0)],
                target_assignment: Some(vec![TopicPartition::new("t", 0)]),
                ..GroupMember::default()
            }],
        };
        let lag = vec![
            PartitionLag {
                topic: "t".into(),
                partition: 0,
                committed: Some(4),
                log_end: Some(10),
                lag: Some(6),
                member_id: Some("m1".into()),
                client_id: Some("c1".into()),
                client_host: Some("/127.0.0.1".into()),
            },
            PartitionLag {
                topic: "t".into(),
                partition: 1,
                committed: None,
                log_end: Some(7),
                lag: None,
                member_id: None,
                client_id: None,
                client_host: None,
            },
        ];
        (d, lag)
    }

    #[test]
    fn describe_json_shape() {
        let (d, lag) = description();
        let v = describe_json(&d, &lag);
        assert_eq!(v["group_id"], "g");
        assert_eq!(v["type"], "consumer");
        assert_eq!(v["state"], "Stable");
        assert_eq!(v["members"][0]["assignment"], json!([{"topic": "t", "partition": 0}]));
        assert_eq!(v["members"][0]["member_epoch"], 3);
        assert_eq!(
            v["offsets"],
            json!([
                {"topic": "t", "partition": 0, "committed": 4, "log_end": 10, "lag": 6,
                 "member_id": "m1", "client_id": "c1", "client_host": "/127.0.0.1"},
                {"topic": "t", "partition": 1, "committed": null, "log_end": 7, "lag": null,
                 "member_id": null, "client_id": null, "client_host": null},
            ])
        );
        let text = describe_text(&d, &lag);
        assert!(text.contains("type consumer, state Stable"), "{text}");
        assert!(text
            .lines()
            .any(|l| l.split_whitespace().take(5).eq(["t", "1", "-", "7", "-"])));
    }

    #[test]
    fn list_and_reset_json_shape() {
        let groups = vec![GroupListing {
            group_id: "g".into(),
            group_type: GroupType::Classic,
            protocol_type: "consumer".into(),
            state: Some("Empty".into()),
            coordinator: 1,
        }];
        assert_eq!(
            list_json(&groups),
            json!([{"group_id": "g", "type": "classic", "protocol_type": "consumer", "state": "Empty", "coordinator": 1}])
        );
        assert!(list_text(&groups).lines().nth(1).unwrap().starts_with("g "));
        let plan = vec![PlannedOffset {
            topic: "t".into(),
            partition: 2,
            current: Some(5),
            new_offset: 0,
        }];
        assert_eq!(
            reset_json("g", &plan, false),
            json!({"group_id": "g", "executed": false,
                   "partitions": [{"topic": "t", "partition": 2, "current": 5, "new_offset": 0}]})
        );
    }
}
