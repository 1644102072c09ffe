//! Replay suppression: the spec's "Commit receipts + replay suppression"
//! (`kafka_2pc_sink_string`, option `replay_suppression`), as pure state
//! machines the two-phase-commit sink ([`super::TwoPhaseCommitSink`])
//! drives: [`CoverageTracker`] (what the sink has got, staged at each
//! barrier as a [`Coverage`] and written into the checkpoint's receipt) and
//! [`ReplaySuppression`] (the judge armed from the receipts above a restore
//! point).
//!
//! When a restore falls back below checkpoints this subtask already
//! committed (a mixed verdict: its receipts `sub<K>-<N>` exist above the
//! restore point), the replay re-emits records the broker already
//! published. The rule, whatever the judge: a record that might not have
//! been committed is PUBLISHED, never swallowed (a duplicate is a defect,
//! a loss is worse).
//!
//! # By input position (exact; the default wherever positions are known)
//!
//! A record that carries where it was read from (a [`KafkaMessage`](super::KafkaMessage)
//! with `partition` and `offset` >= 0, as [`KafkaSource`](super::KafkaSource)
//! emits them) is judged by that position. Each receipt keeps, per input
//! partition, the next offset after the last record the sink got from it
//! before the barrier (cumulative over the sink's life). All of those
//! records were in transactions up to the receipted one, all committed
//! (commits cascade in checkpoint order; an abort stops the tracking, see
//! below), so on replay a record is swallowed iff its offset lies below
//! the highest position the receipts above the restore point name for its
//! partition. This is exact for any number of partitions per subtask and
//! any timestamps. A partition retires once a record at or past its
//! position arrived (offsets only grow within one source's life);
//! suppression retires when every armed partition has.
//!
//! Conditions: a sink subtask must get, on replay, the same records of
//! each input partition it got before (a forward or keyed route from the
//! source, as `clink-kafka copy` has; a round-robin route could hand it a
//! replayed record another subtask had). Positions are keyed by (input
//! topic, partition). A
//! [`KafkaMessage`](super::KafkaMessage) carries no topic, so a sink fed from
//! several input topics must name each batch's topic
//! ([`TwoPhaseCommitSink::send_batch_from`](super::TwoPhaseCommitSink::send_batch_from));
//! plain `send_batch` keys every record under one unnamed input. The
//! tracker checks that each key's offsets strictly increase; a record that
//! breaks it (two inputs mixed under one key, or a source that seeked
//! back) makes every later receipt of this sink carry no positions (warned
//! once): their replay is published again, never swallowed.
//!
//! # By event time (for feeds that only pass a time)
//!
//! A record without a position is judged by its event time (the message
//! channel: its timestamp; the engine's string channel:
//! [`Sink::on_timed_data`](super::Sink::on_timed_data)), with two rules:
//!
//! - per input partition (the record's `partition`; -1 for the engine's
//!   channel, one stream): the receipt keeps the highest event time `H`
//!   the sink got before the barrier, and the replay swallows event times
//!   strictly BELOW `H`. Never a loss when each partition's event times are
//!   non-decreasing (a record after the barrier has an event time >= `H`);
//!   exact when they strictly increase, except the one record AT `H`,
//!   published again (a record after the barrier may share `H`, so nothing
//!   at `H` is swallowed). A partition whose event times decreased is
//!   dropped from every later receipt (warned once); a repeated event time
//!   is warned once (the records at the horizon are published again).
//! - the watermark ([`Sink::on_watermark`](super::Sink::on_watermark)): the
//!   engine promises that no record at or below it follows, so every
//!   record at or below the watermark in force at the barrier came before
//!   it: the replay swallows event times AT OR BELOW the receipt's
//!   watermark horizon. Exact for windowed emissions (stamped
//!   `window_end - 1`, fired as the watermark passes). A receipt written
//!   before positions existed carries a horizon computed without that
//!   promise (the lowest per-partition maximum): it swallows strictly
//!   below it only.
//!
//! A record with neither a position nor an event time cannot be judged: it
//! passes through, counted, and the sink logs it loudly. The event-time
//! rules retire once a watermark passes what they could still swallow, or
//! per partition once a record at or past its horizon arrived.
//!
//! After an abort (`on_abort`) the tracker stops: the aborted interval's
//! records are not committed but lie below later barriers, so every later
//! receipt carries nothing to judge by (the engine restores after an abort
//! anyway, with a new sink).

use std::collections::{BTreeMap, BTreeSet};

/// What [`ReplaySuppression::judge`] decided for one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// Not armed, or not published before: produce it.
    Pass,
    /// Published already by a receipted commit.
    Swallow,
    /// Armed, but nothing to judge the record by: produce it (and say so).
    PassUnjudged,
}

/// Where suppression is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuppressionState {
    /// Nothing receipted above the restore point (or the option is off).
    Off,
    /// Swallowing re-emissions the receipts cover.
    Armed,
    /// Nothing the receipts cover can arrive any more: nothing is judged.
    Retired,
}

/// One input partition: the input topic (`""`: the sink's one unnamed
/// input) and the partition (-1: none, the engine's channel).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct InputPartition {
    /// The input topic; empty for the unnamed input.
    pub topic: String,
    /// The partition; -1 when the records carry none.
    pub partition: i32,
}

impl InputPartition {
    /// `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        InputPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// The most entries one coverage list may hold (a longer one in a state
/// row, receipt or marker is refused as corrupt).
pub const MAX_COVERAGE_ENTRIES: usize = 4096;

/// What a checkpoint's transaction covered (with the ones before it), as
/// its staged row, receipt and marker keep it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Per input partition: the next offset after the last record the sink
    /// got from it. `None`: positions are unknown (a receipt written before
    /// they existed, or an abort or out-of-order offsets stopped the
    /// tracking); `Some` of an empty map: known, none seen.
    pub positions: Option<BTreeMap<InputPartition, i64>>,
    /// Per input partition, for records without a position: the highest
    /// event time the sink got (only partitions whose event times never
    /// decreased).
    pub event_max: BTreeMap<InputPartition, i64>,
}

fn encode_topic(topic: &str) -> String {
    super::twopc::percent_encode_keeping(topic, b"-_.")
}

fn decode_topic(s: &str) -> Option<String> {
    super::twopc::percent_decode(s)
}

/// A coverage list's text: `topic:partition:value` entries, `,`-separated
/// (the topic percent-encoded: no `:`, `,`, `;`, `=` or control byte).
pub fn encode_list(list: &BTreeMap<InputPartition, i64>) -> String {
    let mut out = String::new();
    for (k, v) in list {
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&format!("{}:{}:{v}", encode_topic(&k.topic), k.partition));
    }
    out
}

/// Parses [`encode_list`]'s text; bounded ([`MAX_COVERAGE_ENTRIES`]), the
/// error says what is wrong.
pub fn parse_list(text: &str) -> std::result::Result<BTreeMap<InputPartition, i64>, String> {
    let mut out = BTreeMap::new();
    if text.is_empty() {
        return Ok(out);
    }
    for (i, entry) in text.split(',').enumerate() {
        if i >= MAX_COVERAGE_ENTRIES {
            return Err(format!("more than {MAX_COVERAGE_ENTRIES} coverage entries"));
        }
        let short = || entry.chars().take(40).collect::<String>();
        let mut parts = entry.split(':');
        let (Some(topic), Some(partition), Some(value), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("coverage entry {:?} is not topic:partition:value", short()));
        };
        let topic = decode_topic(topic).ok_or_else(|| format!("coverage entry {:?}: bad topic", short()))?;
        let partition = partition
            .parse::<i32>()
            .map_err(|_| format!("coverage entry {:?}: partition is not a number", short()))?;
        let value = value
            .parse::<i64>()
            .map_err(|_| format!("coverage entry {:?}: value is not a number", short()))?;
        if out.insert(InputPartition { topic, partition }, value).is_some() {
            return Err(format!("coverage entry {:?} twice", short()));
        }
    }
    Ok(out)
}

/// A warning [`CoverageTracker::observe`] raises (each at most once per tracker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoverageWarning {
    /// An offset not above the last one of its key: positions are no
    /// longer tracked (later receipts carry none).
    OffsetsOutOfOrder {
        /// The key.
        input: InputPartition,
        /// The offset seen.
        offset: i64,
        /// The position it was already at.
        position: i64,
    },
    /// An event time below the partition's last: that partition has no
    /// event-time horizon in later receipts.
    EventTimeDecreased {
        /// The key.
        input: InputPartition,
        /// The event time seen.
        event_time: i64,
        /// The last one before it.
        last: i64,
    },
    /// An event time equal to the partition's last: suppression by event
    /// time is not exact (the records at the horizon are published again).
    EventTimeRepeated {
        /// The key.
        input: InputPartition,
        /// The event time.
        event_time: i64,
    },
}

/// What one sink has got in its life, staged at each barrier.
#[derive(Clone, Debug, Default)]
pub struct CoverageTracker {
    positions: BTreeMap<InputPartition, i64>,
    positions_valid: bool,
    /// Per input partition whose event times never decreased, the last
    /// (so the highest) event time: what a barrier stages as `event_max`.
    last_event: BTreeMap<InputPartition, i64>,
    event_broken: BTreeSet<InputPartition>,
    stopped: bool,
    warned_offsets: bool,
    warned_decrease: bool,
    warned_repeat: bool,
}

impl CoverageTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Self {
        CoverageTracker {
            positions_valid: true,
            ..CoverageTracker::default()
        }
    }

    /// The sink got a record of `input` at `offset` (-1: none) with
    /// `event_time`. Returns a warning the first time a condition breaks.
    pub fn observe(&mut self, input: &InputPartition, offset: i64, event_time: Option<i64>) -> Option<CoverageWarning> {
        if self.stopped {
            return None;
        }
        if offset >= 0 {
            if !self.positions_valid {
                return None;
            }
            match self.positions.get_mut(input) {
                Some(position) if offset < *position => {
                    let warning = CoverageWarning::OffsetsOutOfOrder {
                        input: input.clone(),
                        offset,
                        position: *position,
                    };
                    self.positions_valid = false;
                    self.positions.clear();
                    return (!std::mem::replace(&mut self.warned_offsets, true)).then_some(warning);
                }
                Some(position) => *position = offset + 1,
                None => {
                    self.positions.insert(input.clone(), offset + 1);
                }
            }
            return None;
        }
        let t = event_time?;
        if self.event_broken.contains(input) {
            return None;
        }
        match self.last_event.get_mut(input) {
            Some(last) if t < *last => {
                let last = *last;
                self.last_event.remove(input);
                self.event_broken.insert(input.clone());
                (!std::mem::replace(&mut self.warned_decrease, true)).then(|| CoverageWarning::EventTimeDecreased {
                    input: input.clone(),
                    event_time: t,
                    last,
                })
            }
            Some(last) => {
                let repeated = t == *last;
                *last = t;
                (repeated && !std::mem::replace(&mut self.warned_repeat, true)).then(|| {
                    CoverageWarning::EventTimeRepeated {
                        input: input.clone(),
                        event_time: t,
                    }
                })
            }
            None => {
                self.last_event.insert(input.clone(), t);
                None
            }
        }
    }

    /// An abort: the aborted interval's records lie below every later
    /// barrier but are not committed, so nothing later is judgeable.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.positions.clear();
        self.last_event.clear();
    }

    /// Whether [`Self::stop`] was called.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// What a barrier now stages.
    pub fn coverage(&self) -> Coverage {
        if self.stopped {
            return Coverage::default();
        }
        Coverage {
            positions: self.positions_valid.then(|| self.positions.clone()),
            event_max: self.last_event.clone(),
        }
    }
}

/// One receipt's share in arming: its watermark horizon and coverage.
#[derive(Clone, Copy, Debug)]
pub struct Receipted<'a> {
    /// The watermark its sealing barrier saw.
    pub horizon: Option<i64>,
    /// What its transaction (with the ones before it) covered.
    pub coverage: &'a Coverage,
}

/// The replay-suppression judge (no I/O, no clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplaySuppression {
    state: SuppressionState,
    /// Per input partition: (armed position, retired).
    positions: BTreeMap<InputPartition, (i64, bool)>,
    positions_pending: usize,
    by_position: bool,
    event_max: BTreeMap<InputPartition, i64>,
    /// Watermark horizon under the watermark promise: swallow `<=`.
    horizon: Option<i64>,
    /// Horizon of receipts without positions (written before they
    /// existed, computed without the promise): swallow `<`.
    legacy_horizon: Option<i64>,
    swallowed: u64,
    unjudged: u64,
}

impl Default for ReplaySuppression {
    fn default() -> Self {
        ReplaySuppression::off()
    }
}

impl ReplaySuppression {
    /// Not armed: every record passes.
    pub fn off() -> Self {
        ReplaySuppression {
            state: SuppressionState::Off,
            positions: BTreeMap::new(),
            positions_pending: 0,
            by_position: false,
            event_max: BTreeMap::new(),
            horizon: None,
            legacy_horizon: None,
            swallowed: 0,
            unjudged: 0,
        }
    }

    /// Armed from the receipts above the restore point (each covers
    /// everything its sink got up to its barrier, so per partition the
    /// highest value counts); off when they give nothing to judge by.
    /// `watermark` is the one in force now.
    pub fn arm<'a>(receipts: impl IntoIterator<Item = Receipted<'a>>, watermark: Option<i64>) -> Self {
        let mut s = ReplaySuppression::off();
        let max = |slot: &mut Option<i64>, v: i64| *slot = Some(slot.map_or(v, |s| s.max(v)));
        for r in receipts {
            match &r.coverage.positions {
                Some(positions) => {
                    s.by_position = true;
                    for (k, &p) in positions {
                        let e = s.positions.entry(k.clone()).or_insert((p, false));
                        e.0 = e.0.max(p);
                    }
                    if let Some(h) = r.horizon {
                        max(&mut s.horizon, h);
                    }
                }
                None => {
                    if let Some(h) = r.horizon {
                        max(&mut s.legacy_horizon, h);
                    }
                }
            }
            for (k, &t) in &r.coverage.event_max {
                let e = s.event_max.entry(k.clone()).or_insert(t);
                *e = (*e).max(t);
            }
        }
        s.positions_pending = s.positions.len();
        if s.positions_pending > 0 || s.event_rules() {
            s.state = SuppressionState::Armed;
            if let Some(w) = watermark {
                s.handle_watermark(w);
            }
        }
        s
    }

    fn event_rules(&self) -> bool {
        !self.event_max.is_empty() || self.horizon.is_some() || self.legacy_horizon.is_some()
    }

    fn maybe_retire(&mut self) -> bool {
        if self.state == SuppressionState::Armed && self.positions_pending == 0 && !self.event_rules() {
            self.state = SuppressionState::Retired;
            return true;
        }
        false
    }

    /// Where the state machine is.
    pub fn state(&self) -> SuppressionState {
        self.state
    }

    /// Whether it is armed.
    pub fn is_armed(&self) -> bool {
        self.state == SuppressionState::Armed
    }

    /// The watermark horizon it judges by (`<=`), while armed.
    pub fn horizon(&self) -> Option<i64> {
        self.is_armed()
            .then_some(self.horizon.or(self.legacy_horizon))
            .flatten()
    }

    /// The armed positions (per input partition, the offset below which a
    /// replayed record is swallowed), while armed.
    pub fn positions(&self) -> BTreeMap<InputPartition, i64> {
        if !self.is_armed() {
            return BTreeMap::new();
        }
        self.positions.iter().map(|(k, (p, _))| (k.clone(), *p)).collect()
    }

    /// The armed per-partition event-time horizons (swallow below), while armed.
    pub fn event_horizons(&self) -> BTreeMap<InputPartition, i64> {
        if !self.is_armed() {
            return BTreeMap::new();
        }
        self.event_max.clone()
    }

    /// Records swallowed so far.
    pub fn swallowed(&self) -> u64 {
        self.swallowed
    }

    /// Records an armed suppression could not judge (passed through).
    pub fn unjudged(&self) -> u64 {
        self.unjudged
    }

    /// Judges one record: read from `input` at `offset` (-1: unknown) with
    /// `event_time` (`None`: it has none).
    pub fn judge(&mut self, input: &InputPartition, offset: i64, event_time: Option<i64>) -> Judgement {
        if self.state != SuppressionState::Armed {
            return Judgement::Pass;
        }
        if offset >= 0 && self.by_position {
            let Some((position, retired)) = self.positions.get_mut(input) else {
                // Not read before the barrier of any receipt: not published.
                return Judgement::Pass;
            };
            let swallow = offset < *position;
            if !*retired && offset + 1 >= *position {
                *retired = true;
                self.positions_pending -= 1;
                self.maybe_retire();
            }
            if swallow {
                self.swallowed += 1;
                return Judgement::Swallow;
            }
            return Judgement::Pass;
        }
        if !self.event_rules() {
            self.unjudged += 1;
            return Judgement::PassUnjudged;
        }
        let Some(t) = event_time else {
            self.unjudged += 1;
            return Judgement::PassUnjudged;
        };
        let below_partition = match self.event_max.get(input) {
            Some(&h) if t < h => true,
            Some(_) => {
                // At or past the partition's horizon: nothing below it
                // follows in a non-decreasing partition (and passing is
                // never a loss).
                self.event_max.remove(input);
                false
            }
            None => false,
        };
        let swallow =
            below_partition || self.horizon.is_some_and(|w| t <= w) || self.legacy_horizon.is_some_and(|w| t < w);
        self.maybe_retire();
        if swallow {
            self.swallowed += 1;
            Judgement::Swallow
        } else {
            Judgement::Pass
        }
    }

    /// A watermark arrived (no record at or below it follows); `true`
    /// when it retired the suppression.
    pub fn handle_watermark(&mut self, watermark: i64) -> bool {
        if self.state != SuppressionState::Armed {
            return false;
        }
        // A rule that can only swallow event times at or below the
        // watermark has nothing left to judge.
        if self.horizon.is_some_and(|w| w <= watermark) {
            self.horizon = None;
        }
        if self.legacy_horizon.is_some_and(|w| w <= watermark.saturating_add(1)) {
            self.legacy_horizon = None;
        }
        self.event_max.retain(|_, h| *h > watermark.saturating_add(1));
        self.maybe_retire()
    }
}

/// A record's event time on the message channel: its timestamp, `None`
/// when unset (negative).
pub fn event_time(timestamp: i64) -> Option<i64> {
    (timestamp >= 0).then_some(timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(partition: i32) -> InputPartition {
        InputPartition::new("", partition)
    }

    fn cov(positions: Option<&[(i32, i64)]>, event_max: &[(i32, i64)]) -> Coverage {
        Coverage {
            positions: positions.map(|l| l.iter().map(|(k, v)| (p(*k), *v)).collect()),
            event_max: event_max.iter().map(|(k, v)| (p(*k), *v)).collect(),
        }
    }

    fn arm(receipts: &[(Option<i64>, Coverage)], watermark: Option<i64>) -> ReplaySuppression {
        ReplaySuppression::arm(
            receipts.iter().map(|(h, c)| Receipted {
                horizon: *h,
                coverage: c,
            }),
            watermark,
        )
    }

    #[test]
    fn off_passes_everything_and_counts_nothing() {
        let mut s = arm(&[], Some(5));
        assert_eq!(s.state(), SuppressionState::Off);
        assert_eq!(s.judge(&p(0), 3, Some(1)), Judgement::Pass);
        assert_eq!(s.judge(&p(-1), -1, None), Judgement::Pass);
        assert!(!s.handle_watermark(100));
        assert_eq!((s.swallowed(), s.unjudged()), (0, 0));
        // A receipt with known but empty coverage gives nothing to judge by.
        let s = arm(&[(None, cov(Some(&[]), &[]))], None);
        assert_eq!(s.state(), SuppressionState::Off);
    }

    /// Positions: swallowed iff below the highest receipted position of
    /// its partition, whatever its timestamp; a partition retires once a
    /// record at or past its position arrived, suppression once all did.
    #[test]
    fn positions_are_exact_per_partition_and_retire() {
        let mut s = arm(
            &[
                (Some(10), cov(Some(&[(0, 100), (3, 7)]), &[])),
                (Some(12), cov(Some(&[(0, 150), (3, 7)]), &[])),
            ],
            None,
        );
        assert!(s.is_armed());
        assert_eq!(s.positions(), [(p(0), 150), (p(3), 7)].into());
        // Same timestamp on both sides of the position: only the offset counts.
        assert_eq!(s.judge(&p(0), 148, Some(5)), Judgement::Swallow);
        assert_eq!(s.judge(&p(3), 5, Some(5)), Judgement::Swallow);
        assert_eq!(s.judge(&p(3), 6, Some(5)), Judgement::Swallow, "the last covered");
        assert_eq!(s.judge(&p(3), 7, Some(5)), Judgement::Pass, "not covered, same time");
        assert_eq!(
            s.judge(&p(1), 0, Some(0)),
            Judgement::Pass,
            "a partition no receipt covers"
        );
        assert!(s.watermark_does_not_retire_positions());
        assert_eq!(s.judge(&p(0), 149, None), Judgement::Swallow);
        assert_eq!(
            s.state(),
            SuppressionState::Retired,
            "every partition reached its position"
        );
        assert_eq!(s.judge(&p(0), 1, Some(1)), Judgement::Pass);
        assert_eq!((s.swallowed(), s.unjudged()), (4, 0));
        // Another topic's partition 0 is another key.
        let mut s = arm(&[(None, cov(Some(&[(0, 10)]), &[]))], None);
        assert_eq!(s.judge(&InputPartition::new("other", 0), 3, None), Judgement::Pass);
        // A record without a position under position-only receipts: unjudged.
        assert_eq!(s.judge(&p(-1), -1, Some(3)), Judgement::PassUnjudged);
        assert_eq!(s.unjudged(), 1);
    }

    impl ReplaySuppression {
        fn watermark_does_not_retire_positions(&mut self) -> bool {
            !self.handle_watermark(i64::MAX - 1) && self.is_armed()
        }
    }

    /// Per-partition event-time horizons swallow strictly below: at equal
    /// timestamps (a millisecond holds thousands of records) a record at
    /// the horizon may be one read after the barrier, so it is published.
    #[test]
    fn event_time_never_swallows_at_the_partition_horizon() {
        let mut s = arm(&[(None, cov(Some(&[]), &[(0, 50), (1, 80)]))], None);
        assert!(s.is_armed());
        assert_eq!(s.judge(&p(0), -1, Some(49)), Judgement::Swallow);
        assert_eq!(
            s.judge(&p(0), -1, Some(50)),
            Judgement::Pass,
            "at the horizon: maybe not committed"
        );
        assert_eq!(
            s.judge(&p(0), -1, Some(10)),
            Judgement::Pass,
            "the partition retired at its horizon"
        );
        assert_eq!(s.judge(&p(1), -1, Some(79)), Judgement::Swallow);
        assert_eq!(
            s.judge(&p(2), -1, Some(1)),
            Judgement::Pass,
            "no horizon for partition 2"
        );
        assert_eq!(s.judge(&p(1), -1, None), Judgement::PassUnjudged);
        assert!(s.handle_watermark(79), "nothing below 80 can follow");
        assert_eq!((s.swallowed(), s.unjudged()), (2, 1));
    }

    /// The watermark horizon: the promise (nothing at or below a watermark
    /// follows) makes `<=` safe; a receipt from before positions existed
    /// had no such promise: `<` only.
    #[test]
    fn the_watermark_horizon_swallows_at_or_below_and_retires_past_it() {
        let mut s = arm(
            &[(Some(10), cov(Some(&[]), &[])), (Some(30), cov(Some(&[]), &[]))],
            None,
        );
        assert_eq!(s.horizon(), Some(30));
        assert_eq!(
            s.judge(&p(-1), -1, Some(30)),
            Judgement::Swallow,
            "at the horizon: published"
        );
        assert_eq!(s.judge(&p(-1), -1, Some(31)), Judgement::Pass);
        assert!(!s.handle_watermark(29));
        assert_eq!(s.judge(&p(-1), -1, Some(29)), Judgement::Swallow);
        assert!(s.handle_watermark(30), "nothing at or below 30 follows");
        assert_eq!(s.state(), SuppressionState::Retired);
        assert_eq!(s.judge(&p(-1), -1, Some(1)), Judgement::Pass);

        let mut legacy = arm(&[(Some(30), Coverage::default())], None);
        assert_eq!(
            legacy.judge(&p(0), 5, Some(30)),
            Judgement::Pass,
            "old receipt: strictly below"
        );
        assert_eq!(legacy.judge(&p(0), 4, Some(29)), Judgement::Swallow);
        assert!(!legacy.handle_watermark(28));
        assert!(legacy.handle_watermark(29));

        let s = arm(&[(Some(7), cov(Some(&[]), &[]))], Some(7));
        assert_eq!(s.state(), SuppressionState::Retired, "a restore past the horizon");
    }

    #[test]
    fn the_tracker_keeps_positions_and_non_decreasing_event_times() {
        let mut t = CoverageTracker::new();
        assert_eq!(t.coverage(), cov(Some(&[]), &[]));
        assert_eq!(t.observe(&p(2), 10, Some(5)), None);
        assert_eq!(t.observe(&p(2), 14, Some(5)), None, "gaps (control records) are fine");
        assert_eq!(t.observe(&p(-1), -1, Some(7)), None);
        assert!(matches!(
            t.observe(&p(-1), -1, Some(7)),
            Some(CoverageWarning::EventTimeRepeated { .. })
        ));
        assert_eq!(t.observe(&p(-1), -1, Some(7)), None, "warned once");
        assert_eq!(t.observe(&p(-1), -1, None), None);
        assert_eq!(t.coverage(), cov(Some(&[(2, 15)]), &[(-1, 7)]));
        assert!(matches!(
            t.observe(&p(-1), -1, Some(6)),
            Some(CoverageWarning::EventTimeDecreased { .. })
        ));
        t.observe(&p(-1), -1, Some(9));
        assert_eq!(
            t.coverage(),
            cov(Some(&[(2, 15)]), &[]),
            "a decreasing partition is dropped"
        );
        assert!(matches!(
            t.observe(&p(2), 14, None),
            Some(CoverageWarning::OffsetsOutOfOrder { .. })
        ));
        assert_eq!(t.coverage().positions, None, "positions no longer known");
        t.stop();
        assert_eq!(t.coverage(), Coverage::default());
    }

    #[test]
    fn lists_round_trip_and_refuse_garbage() {
        let list: BTreeMap<_, _> = [
            (InputPartition::new("", 0), 5),
            (InputPartition::new("a:b,c;d=e", -1), -7),
            (InputPartition::new("orders.v1", 12), i64::MAX),
        ]
        .into();
        let text = encode_list(&list);
        assert!(
            !text.contains(';') && !text.contains('=') && !text.contains('\n'),
            "{text}"
        );
        assert_eq!(parse_list(&text).unwrap(), list);
        assert_eq!(parse_list("").unwrap(), BTreeMap::new());
        for bad in [":0", ":x:1", ":0:y", ":0:1,:0:2", "%zz:0:1", ":0:1:2", ","] {
            assert!(parse_list(bad).is_err(), "{bad:?}");
        }
        let long = (0..=MAX_COVERAGE_ENTRIES)
            .map(|i| format!(":{i}:1"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(parse_list(&long).unwrap_err().contains("more than"));
    }

    #[test]
    fn a_negative_timestamp_is_no_event_time() {
        assert_eq!(event_time(-1), None);
        assert_eq!(event_time(0), Some(0));
        assert_eq!(event_time(1_700_000_000_000), Some(1_700_000_000_000));
    }
}
