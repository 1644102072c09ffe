//! The client-side partition assignors of the classic protocol, as pure
//! functions of the members' subscriptions and the partition counts.
//!
//! The leader runs the one the coordinator chose (the JoinGroup response's
//! `protocol_name`) over every member's decoded subscription.
//!
//! **Member order** (all three): static members first, ordered by
//! `group.instance.id`, then dynamic members ordered by member id — the
//! Java client's `MemberInfo.compareTo`. Strings compare by bytes (UTF-8),
//! which is Java's UTF-16 order for every identifier outside the
//! surrogate range. A member id listed twice counts once (the first).
//!
//! **Range** (`range`, Java's `RangeAssignor` without racks): per topic,
//! the members subscribed to it in member order; with `n` partitions and
//! `c` members, member `i` gets the contiguous run starting at
//! `(n / c) * i + min(i, n % c)` of length `n / c`, plus one if `i < n % c`.
//!
//! **Round robin** (`roundrobin`, Java's `RoundRobinAssignor`): every
//! partition of every subscribed topic, topics by name and partitions by
//! number, dealt in turn over the members in member order, skipping a
//! member not subscribed to the partition's topic.
//!
//! **Cooperative sticky** (`cooperative-sticky`, KIP-429): a sticky target
//! first —
//! 1. a partition stays with the member that owns it (`owned_partitions`)
//!    if that member still subscribes to its topic, the partition exists,
//!    and no other claimant has a newer (or the same) generation;
//! 2. each remaining partition (by topic, then number) goes to the
//!    subscribed member with the fewest partitions (ties: member order);
//! 3. then, while some member has at least two more partitions than a
//!    member that could take one of them, its highest partition that it did
//!    not own moves (else its highest owned one) to the least loaded such
//!    member.
//!
//!    With equal subscriptions the counts end within one of each other;
//!    with unequal ones no single move improves the balance.
//!
//! Then the incremental rule: a partition whose target is not its current
//! owner is left out of this round's assignment altogether. Its owner sees
//! it missing and revokes it, then rejoins; the next round finds it
//! unowned and assigns it. So a partition is never owned by two members at
//! once. The target is not byte-for-byte Java's `AbstractStickyAssignor`
//! (which optimises stickiness further under unequal subscriptions), but it
//! is balanced and sticky by the rules above, and any member — Java or
//! ours — follows whatever the leader hands out.

use std::collections::{BTreeMap, BTreeSet};

/// A topic partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic name.
    pub topic: String,
    /// The partition number.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic[partition]`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// A set of partitions, ordered by topic then partition.
pub type PartitionSet = BTreeSet<TopicPartition>;

/// The most partitions of one topic an assignor deals out. Counts come
/// from metadata (where each partition is listed); this cap only keeps a
/// nonsensical count from costing unbounded memory.
pub const MAX_TOPIC_PARTITIONS: i32 = 1 << 20;

/// One member of the group as the leader sees it: what its JoinGroup
/// subscription said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberSubscription {
    /// The member id the coordinator gave it.
    pub member_id: String,
    /// Its `group.instance.id` (static membership), if any.
    pub group_instance_id: Option<String>,
    /// The topics it subscribes to.
    pub topics: BTreeSet<String>,
    /// The partitions it says it owns (subscription v1+).
    pub owned: PartitionSet,
    /// The generation its owned partitions are from (-1: unknown).
    pub generation: i32,
    /// Its rack (subscription v3+); not used by these assignors.
    pub rack_id: Option<String>,
}

/// How partitions change hands in a rebalance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RebalanceProtocol {
    /// Every member gives up everything before it rejoins.
    Eager,
    /// Members keep what they own; only what moves is revoked (KIP-429).
    Cooperative,
}

/// The classic protocol's client-side assignors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assignor {
    /// `range`.
    Range,
    /// `roundrobin`.
    RoundRobin,
    /// `cooperative-sticky`.
    CooperativeSticky,
}

impl Assignor {
    /// The protocol name in JoinGroup (the Java client's).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// The assignor of that name.
    pub fn from_name(name: &str) -> Option<Assignor> {
        [Assignor::Range, Assignor::RoundRobin, Assignor::CooperativeSticky]
            .into_iter()
            .find(|a| a.name() == name)
    }

    /// The rebalance protocol it supports at best.
    pub fn rebalance_protocol(self) -> RebalanceProtocol {
        match self {
            Assignor::CooperativeSticky => RebalanceProtocol::Cooperative,
            Assignor::Range | Assignor::RoundRobin => RebalanceProtocol::Eager,
        }
    }

    /// The assignment of every member (each member id has an entry).
    /// `partitions` maps a topic to its partition count; a topic missing
    /// from it (unknown, or not existing) is assigned to nobody.
    pub fn assign(
        self,
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, PartitionSet> {
        let members = ordered(members);
        match self {
            Assignor::Range => range(&members, partitions),
            Assignor::RoundRobin => round_robin(&members, partitions),
            Assignor::CooperativeSticky => cooperative_sticky(&members, partitions),
        }
    }
}

/// The members in the Java client's order, without repeated member ids.
fn ordered(members: &[MemberSubscription]) -> Vec<&MemberSubscription> {
    let mut seen = BTreeSet::new();
    let mut out: Vec<&MemberSubscription> = members.iter().filter(|m| seen.insert(m.member_id.as_str())).collect();
    out.sort_by(|a, b| match (&a.group_instance_id, &b.group_instance_id) {
        (Some(x), Some(y)) => x.cmp(y).then_with(|| a.member_id.cmp(&b.member_id)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    });
    out
}

fn count_of(partitions: &BTreeMap<String, i32>, topic: &str) -> i32 {
    partitions
        .get(topic)
        .copied()
        .unwrap_or(0)
        .clamp(0, MAX_TOPIC_PARTITIONS)
}

fn empty_result(members: &[&MemberSubscription]) -> BTreeMap<String, PartitionSet> {
    members
        .iter()
        .map(|m| (m.member_id.clone(), PartitionSet::new()))
        .collect()
}

fn range(members: &[&MemberSubscription], partitions: &BTreeMap<String, i32>) -> BTreeMap<String, PartitionSet> {
    let mut out = empty_result(members);
    let topics: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    for topic in topics {
        let n = count_of(partitions, topic);
        let consumers: Vec<&&MemberSubscription> = members.iter().filter(|m| m.topics.contains(topic)).collect();
        // `consumers` is not empty: the topic came from a member. Both
        // fit i32: c <= n members and the run ends at n.
        let c = i32::try_from(consumers.len()).unwrap_or(i32::MAX).max(1);
        let per = n.checked_div(c).unwrap_or(0);
        let extra = n.checked_rem(c).unwrap_or(0);
        for (i, m) in (0i32..).zip(consumers) {
            let start = per.saturating_mul(i).saturating_add(i.min(extra));
            let len = per.saturating_add(i32::from(i < extra));
            if let Some(set) = out.get_mut(&m.member_id) {
                set.extend((start..start.saturating_add(len)).map(|p| TopicPartition::new(topic.clone(), p)));
            }
        }
    }
    out
}

fn round_robin(members: &[&MemberSubscription], partitions: &BTreeMap<String, i32>) -> BTreeMap<String, PartitionSet> {
    let mut out = empty_result(members);
    let topics: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    let mut next = 0usize;
    for topic in topics {
        for p in 0..count_of(partitions, topic) {
            // Someone subscribes to `topic` (it came from a member), so
            // this finds one within a full turn.
            for _ in 0..members.len() {
                let Some(m) = next.checked_rem(members.len()).and_then(|i| members.get(i)) else {
                    break;
                };
                next = next.wrapping_add(1);
                if m.topics.contains(topic) {
                    if let Some(set) = out.get_mut(&m.member_id) {
                        set.insert(TopicPartition::new(topic.clone(), p));
                    }
                    break;
                }
            }
        }
    }
    out
}

/// The owner of each partition that can stay where it is (rule 1).
fn valid_owners(
    members: &[&MemberSubscription],
    partitions: &BTreeMap<String, i32>,
) -> BTreeMap<TopicPartition, usize> {
    // partition -> (highest generation, claimants at it)
    let mut claims: BTreeMap<&TopicPartition, (i32, Vec<usize>)> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        for tp in &m.owned {
            if !m.topics.contains(&tp.topic) || tp.partition < 0 || tp.partition >= count_of(partitions, &tp.topic) {
                continue;
            }
            let e = claims.entry(tp).or_insert((m.generation, Vec::new()));
            if m.generation > e.0 {
                *e = (m.generation, vec![i]);
            } else if m.generation == e.0 {
                e.1.push(i);
            }
        }
    }
    claims
        .into_iter()
        .filter_map(|(tp, (_, who))| match who.as_slice() {
            [only] => Some((tp.clone(), *only)),
            _ => None,
        })
        .collect()
}

fn cooperative_sticky(
    members: &[&MemberSubscription],
    partitions: &BTreeMap<String, i32>,
) -> BTreeMap<String, PartitionSet> {
    let owners = valid_owners(members, partitions);
    let target = sticky_target(members, partitions, &owners);
    let mut out = empty_result(members);
    for (i, set) in target.into_iter().enumerate() {
        let Some(m) = members.get(i) else { continue };
        let keep = set
            .into_iter()
            .filter(|tp| owners.get(tp).is_none_or(|&owner| owner == i))
            .collect();
        out.insert(m.member_id.clone(), keep);
    }
    out
}

/// The balanced, sticky target (rules 1-3), per member index.
fn sticky_target(
    members: &[&MemberSubscription],
    partitions: &BTreeMap<String, i32>,
    owners: &BTreeMap<TopicPartition, usize>,
) -> Vec<PartitionSet> {
    let mut sets: Vec<PartitionSet> = vec![PartitionSet::new(); members.len()];
    for (tp, &i) in owners {
        if let Some(s) = sets.get_mut(i) {
            s.insert(tp.clone());
        }
    }
    let least_loaded = |sets: &[PartitionSet], topic: &str, except: Option<usize>| -> Option<usize> {
        members
            .iter()
            .enumerate()
            .filter(|(i, m)| Some(*i) != except && m.topics.contains(topic))
            .min_by_key(|(i, _)| (sets.get(*i).map_or(usize::MAX, |s| s.len()), *i))
            .map(|(i, _)| i)
    };
    let topics: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    let mut total = 0usize;
    for topic in topics {
        for p in 0..count_of(partitions, topic) {
            total = total.saturating_add(1);
            let tp = TopicPartition::new(topic.clone(), p);
            if owners.contains_key(&tp) {
                continue;
            }
            if let Some(i) = least_loaded(&sets, topic, None) {
                if let Some(s) = sets.get_mut(i) {
                    s.insert(tp);
                }
            }
        }
    }
    // Rule 3. Each move lowers the sum of squared counts, so this ends;
    // the cap only bounds the work a pathological input can ask for.
    let cap = total.saturating_mul(members.len()).saturating_add(1);
    for _ in 0..cap {
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(sets.get(i).map_or(0, |s| s.len())), i));
        let mut moved = None;
        'find: for &a in &order {
            let Some(from) = sets.get(a) else { continue };
            let have = from.len();
            // Newly placed partitions move first, then owned ones; the
            // highest first within each.
            let candidates = from
                .iter()
                .rev()
                .filter(|tp| owners.get(*tp) != Some(&a))
                .chain(from.iter().rev().filter(|tp| owners.get(*tp) == Some(&a)));
            for tp in candidates {
                if let Some(b) = least_loaded(&sets, &tp.topic, Some(a)) {
                    if sets.get(b).map_or(usize::MAX, |s| s.len()).saturating_add(1) < have {
                        moved = Some((a, b, tp.clone()));
                        break 'find;
                    }
                }
            }
        }
        let Some((a, b, tp)) = moved else { break };
        if let Some(s) = sets.get_mut(a) {
            s.remove(&tp);
        }
        if let Some(s) = sets.get_mut(b) {
            s.insert(tp);
        }
    }
    sets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.into(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            generation: -1,
            ..Default::default()
        }
    }

    fn counts(c: &[(&str, i32)]) -> BTreeMap<String, i32> {
        c.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn show(a: &BTreeMap<String, PartitionSet>) -> BTreeMap<String, Vec<String>> {
        a.iter()
            .map(|(m, s)| {
                (
                    m.clone(),
                    s.iter().map(|tp| format!("{}{}", tp.topic, tp.partition)).collect(),
                )
            })
            .collect()
    }

    fn expect(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(m, ps)| (m.to_string(), ps.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    /// The example in the Java `RangeAssignor` javadoc: C0 and C1 both
    /// subscribe to t0 and t1, three partitions each.
    #[test]
    fn range_java_doc_example() {
        let m = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let a = Assignor::Range.assign(&m, &counts(&[("t0", 3), ("t1", 3)]));
        assert_eq!(
            show(&a),
            expect(&[("C0", &["t00", "t01", "t10", "t11"]), ("C1", &["t02", "t12"])])
        );
    }

    /// Java `RangeAssignorTest.testTwoConsumersOneTopicThreePartitions` and
    /// `testMultipleConsumersMixedTopics` (consumer1 [topic1], consumer2
    /// [topic1, topic2], consumer3 [topic1]; 3 and 2 partitions).
    #[test]
    fn range_java_tests() {
        let m = [member("consumer1", &["t"]), member("consumer2", &["t"])];
        let a = Assignor::Range.assign(&m, &counts(&[("t", 3)]));
        assert_eq!(
            show(&a),
            expect(&[("consumer1", &["t0", "t1"]), ("consumer2", &["t2"])])
        );
        let m = [
            member("consumer1", &["topic1"]),
            member("consumer2", &["topic1", "topic2"]),
            member("consumer3", &["topic1"]),
        ];
        let a = Assignor::Range.assign(&m, &counts(&[("topic1", 3), ("topic2", 2)]));
        assert_eq!(
            show(&a),
            expect(&[
                ("consumer1", &["topic10"]),
                ("consumer2", &["topic11", "topic20", "topic21"]),
                ("consumer3", &["topic12"]),
            ])
        );
    }

    /// The example in the Java `RoundRobinAssignor` javadoc: C0 and C1
    /// both on t0 and t1 (3 partitions each); then the unequal one: C0 on
    /// t0, C1 on t0 and t1, C2 on t0, t1, t2 (1, 2 and 3 partitions).
    #[test]
    fn round_robin_java_doc_examples() {
        let m = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let a = Assignor::RoundRobin.assign(&m, &counts(&[("t0", 3), ("t1", 3)]));
        assert_eq!(
            show(&a),
            expect(&[("C0", &["t00", "t02", "t11"]), ("C1", &["t01", "t10", "t12"])])
        );
        let m = [
            member("C0", &["t0"]),
            member("C1", &["t0", "t1"]),
            member("C2", &["t0", "t1", "t2"]),
        ];
        let a = Assignor::RoundRobin.assign(&m, &counts(&[("t0", 1), ("t1", 2), ("t2", 3)]));
        assert_eq!(
            show(&a),
            expect(&[
                ("C0", &["t00"]),
                ("C1", &["t10"]),
                ("C2", &["t11", "t20", "t21", "t22"]),
            ])
        );
    }

    #[test]
    fn static_members_sort_first_by_instance_id() {
        let mut a = member("a-dynamic", &["t"]);
        a.group_instance_id = None;
        let mut z = member("z-static", &["t"]);
        z.group_instance_id = Some("i1".into());
        let r = Assignor::Range.assign(&[a, z], &counts(&[("t", 3)]));
        assert_eq!(show(&r), expect(&[("a-dynamic", &["t2"]), ("z-static", &["t0", "t1"])]));
    }

    #[test]
    fn unknown_topics_and_duplicates_and_hostile_counts() {
        let m = [member("a", &["t", "missing"]), member("a", &["t"]), member("b", &["t"])];
        let r = Assignor::RoundRobin.assign(&m, &counts(&[("t", 2), ("neg", -5)]));
        assert_eq!(show(&r), expect(&[("a", &["t0"]), ("b", &["t1"])]));
        for assignor in [Assignor::Range, Assignor::RoundRobin, Assignor::CooperativeSticky] {
            let r = assignor.assign(&m, &counts(&[("t", i32::MIN)]));
            assert!(r.values().all(|s| s.is_empty()));
            assert!(assignor.assign(&[], &counts(&[("t", 3)])).is_empty());
        }
    }

    fn counts_of(a: &BTreeMap<String, PartitionSet>) -> Vec<usize> {
        a.values().map(|s| s.len()).collect()
    }

    #[test]
    fn sticky_balances_fresh_group() {
        let m: Vec<_> = ["a", "b", "c"].iter().map(|id| member(id, &["x", "y"])).collect();
        let r = Assignor::CooperativeSticky.assign(&m, &counts(&[("x", 4), ("y", 3)]));
        let c = counts_of(&r);
        assert_eq!(c.iter().sum::<usize>(), 7);
        assert!(c.iter().max().unwrap() - c.iter().min().unwrap() <= 1, "{c:?}");
    }

    #[test]
    fn sticky_keeps_owned_and_defers_moves() {
        // a owned everything (gen 1); b joins. a keeps 3 of 6, the other 3
        // are left out of this round (a revokes them), then assigned to b
        // in the next.
        let mut a = member("a", &["t"]);
        a.owned = (0..6).map(|p| TopicPartition::new("t", p)).collect();
        a.generation = 1;
        let b = member("b", &["t"]);
        let r = Assignor::CooperativeSticky.assign(&[a.clone(), b.clone()], &counts(&[("t", 6)]));
        assert_eq!(r["a"].len(), 3);
        assert!(r["a"].iter().all(|tp| a.owned.contains(tp)));
        assert!(r["b"].is_empty(), "moved partitions wait for their revocation");
        // Second round: a owns its 3, b none.
        a.owned = r["a"].clone();
        a.generation = 2;
        let r2 = Assignor::CooperativeSticky.assign(&[a.clone(), b], &counts(&[("t", 6)]));
        assert_eq!(r2["a"], r["a"]);
        assert_eq!(r2["b"].len(), 3);
        assert!(r2["a"].is_disjoint(&r2["b"]));
    }

    #[test]
    fn sticky_conflicting_claims_newest_generation_wins() {
        let mut a = member("a", &["t"]);
        a.owned = [TopicPartition::new("t", 0)].into();
        a.generation = 3;
        let mut b = member("b", &["t"]);
        b.owned = [TopicPartition::new("t", 0), TopicPartition::new("t", 1)].into();
        b.generation = 2;
        let r = Assignor::CooperativeSticky.assign(&[a, b], &counts(&[("t", 2)]));
        assert_eq!(show(&r), expect(&[("a", &["t0"]), ("b", &["t1"])]));
    }

    #[test]
    fn sticky_balance_property_small_exhaustive() {
        // Every owned layout of 5 partitions over 3 members (each partition
        // owned by a, b, c or nobody), equal subscriptions: the target is
        // balanced and never gives a partition to two members; owned
        // partitions kept are at least what balance allows.
        let ids = ["a", "b", "c"];
        for code in 0..4usize.pow(5) {
            let mut ms: Vec<MemberSubscription> = ids.iter().map(|id| member(id, &["t"])).collect();
            let mut c = code;
            for p in 0..5 {
                let who = c % 4;
                c /= 4;
                if who < 3 {
                    ms[who].owned.insert(TopicPartition::new("t", p));
                    ms[who].generation = 1;
                }
            }
            let refs: Vec<&MemberSubscription> = ms.iter().collect();
            let owners = valid_owners(&refs, &counts(&[("t", 5)]));
            let target = sticky_target(&refs, &counts(&[("t", 5)]), &owners);
            let lens: Vec<usize> = target.iter().map(|s| s.len()).collect();
            assert_eq!(lens.iter().sum::<usize>(), 5);
            assert!(
                lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1,
                "{code}: {lens:?}"
            );
            // Stickiness: each member keeps min(owned, its target size)
            // of what it owned.
            for (m, t) in ms.iter().zip(&target) {
                let kept = m.owned.intersection(t).count();
                assert_eq!(kept, m.owned.len().min(t.len()), "{code}");
            }
            let r = Assignor::CooperativeSticky.assign(&ms, &counts(&[("t", 5)]));
            let mut seen = PartitionSet::new();
            for s in r.values() {
                for tp in s {
                    assert!(seen.insert(tp.clone()));
                }
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for a in [Assignor::Range, Assignor::RoundRobin, Assignor::CooperativeSticky] {
            assert_eq!(Assignor::from_name(a.name()), Some(a));
        }
        assert_eq!(Assignor::from_name("sticky"), None);
    }
}
