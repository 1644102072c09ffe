//! `--backend native|rdkafka` for `produce`, `consume`, `roundtrip` and
//! `copy`: which Kafka client runs underneath. `native` is the pure-Rust
//! client; `rdkafka` is librdkafka through the connector's backend traits
//! (`clink_kafka::connector::rdkafka`) and needs a binary built with
//! `--features rdkafka`: without it the command fails naming the feature.

use anyhow::bail;
use clap::Args;
use clink_kafka::connector::options::Backend;

/// The `--backend` option.
#[derive(Args, Debug, Clone)]
pub struct BackendArgs {
    /// Kafka client: native (pure Rust) or rdkafka (librdkafka; needs a
    /// binary built with --features rdkafka).
    #[arg(long = "backend", value_name = "native|rdkafka", default_value = "native")]
    pub name: String,
}

impl BackendArgs {
    /// The backend named, refused when this binary cannot run it.
    pub fn backend(&self) -> anyhow::Result<Backend> {
        let backend = match Backend::parse("--backend", &self.name) {
            Ok(b) => b,
            Err(e) => bail!("{e}"),
        };
        if let Err(e) = backend.check_available("--backend", &self.name) {
            bail!("{e}");
        }
        Ok(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_unavailable_backends_are_refused_by_name() {
        let e = BackendArgs {
            name: "librdkafka".into(),
        }
        .backend()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--backend") && e.contains("one of native, rdkafka"), "{e}");
        assert_eq!(
            BackendArgs { name: "NATIVE".into() }.backend().unwrap(),
            Backend::Native
        );
        let rd = BackendArgs { name: "rdkafka".into() }.backend();
        if cfg!(feature = "rdkafka") {
            assert_eq!(rd.unwrap(), Backend::Rdkafka);
        } else {
            let e = rd.unwrap_err().to_string();
            assert!(e.contains("cargo feature `rdkafka`"), "{e}");
        }
    }
}
