//! clink-kafka
