//! Named (topic, partition) and (topic, partition, offset) values, instead
//! of positional tuples in public signatures.

use std::fmt;

/// One partition of one topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition index.
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

    /// This partition at `offset`.
    pub fn at(&self, offset: i64) -> TopicPartitionOffset {
        TopicPartitionOffset::new(self.topic.clone(), self.partition, offset)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.topic, self.partition)
    }
}

/// An offset in one partition of one topic, with the optional metadata
/// string a group offset commit stores beside it. In a commit the offset
/// is the next one to consume (the last processed + 1), as in Kafka.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartitionOffset {
    /// The topic's name.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// Metadata committed with the offset (group commits), if any.
    pub metadata: Option<String>,
}

impl TopicPartitionOffset {
    /// `topic[partition]@offset`, without metadata.
    pub fn new(topic: impl Into<String>, partition: i32, offset: i64) -> Self {
        TopicPartitionOffset {
            topic: topic.into(),
            partition,
            offset,
            metadata: None,
        }
    }

    /// With the metadata string a group commit stores beside the offset.
    pub fn with_metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// The partition, without the offset.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }
}

impl fmt::Display for TopicPartitionOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]@{}", self.topic, self.partition, self.offset)
    }
}

/// An offset in one partition, where the topic is implied by the context
/// (a source reading one topic, a backend assigned partitions of one topic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionOffset {
    /// The partition index.
    pub partition: i32,
    /// The offset: in an assignment, the next offset to read.
    pub offset: i64,
}

impl PartitionOffset {
    /// `partition@offset`.
    pub fn new(partition: i32, offset: i64) -> Self {
        PartitionOffset { partition, offset }
    }
}

impl fmt::Display for PartitionOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]@{}", self.partition, self.offset)
    }
}
