//! The CLI's commands, and the options they share: which brokers, and how to
//! authenticate. Library errors are wrapped with `anyhow` context here.

use anyhow::{bail, Context};
use clap::Args;
use clink_kafka::client::ClientConfig;
use clink_kafka::wire::sasl::SaslMechanism;
use clink_kafka::wire::secret::Secret;

pub mod consume;
pub mod produce;
pub mod roundtrip;
pub mod txn;

/// Broker used when neither --brokers nor $CLINK_KAFKA_BROKERS is given
/// (the plaintext listener of `scripts/kafka-local`).
pub const DEFAULT_BROKERS: &str = "127.0.0.1:19092";

/// How to reach and authenticate to the cluster.
#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    /// Bootstrap brokers, comma-separated host:port.
    #[arg(long, env = "CLINK_KAFKA_BROKERS", default_value = DEFAULT_BROKERS)]
    pub brokers: String,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_PLAINTEXT listener).
    #[arg(long)]
    pub sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long)]
    pub sasl_username: Option<String>,
    /// Name of the environment variable holding the SASL password (preferred).
    #[arg(long, value_name = "VAR")]
    pub sasl_password_env: Option<String>,
    /// The SASL password itself. Visible to other users in the process list:
    /// prefer --sasl-password-env.
    #[arg(long)]
    pub sasl_password: Option<String>,
    /// client.id sent to the brokers.
    #[arg(long, default_value = "clink-kafka-cli")]
    pub client_id: String,
    /// Bound on each request, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub request_timeout_ms: u64,
}

impl ConnectArgs {
    /// The client configuration these options describe.
    pub fn client_config(&self) -> anyhow::Result<ClientConfig> {
        let mut config = ClientConfig::new(&self.brokers);
        config.client_id = self.client_id.clone();
        config.request_timeout = std::time::Duration::from_millis(self.request_timeout_ms);
        // A missing topic should fail an interactive command soon.
        config.metadata_max_wait = std::time::Duration::from_secs(10);
        let password = match (&self.sasl_password_env, &self.sasl_password) {
            (Some(_), Some(_)) => bail!("give either --sasl-password-env or --sasl-password, not both"),
            (Some(var), None) => Some(Secret::new(
                std::env::var(var).with_context(|| format!("reading the SASL password from ${var}"))?,
            )),
            (None, Some(p)) => Some(Secret::new(p.clone())),
            (None, None) => None,
        };
        match (&self.sasl_mechanism, &self.sasl_username, password) {
            (None, None, None) => {}
            (Some(m), Some(user), Some(password)) => {
                let mechanism: SaslMechanism = m.parse().context("--sasl-mechanism")?;
                config = config.with_sasl(mechanism, user.clone(), password);
            }
            (None, _, _) => bail!("--sasl-username/--sasl-password need --sasl-mechanism"),
            (Some(_), None, _) => bail!("--sasl-mechanism needs --sasl-username"),
            (Some(_), Some(_), None) => bail!("--sasl-mechanism needs --sasl-password-env VAR (or --sasl-password)"),
        }
        Ok(config)
    }
}

/// Parses `k=v` for --header.
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not key=value")),
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    // Digits before the first comma: 1..=3.
    let mut until_comma = (s.len() + 2) % 3 + 1;
    for c in s.chars() {
        if until_comma == 0 {
            out.push(',');
            until_comma = 3;
        }
        out.push(c);
        until_comma -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_groups_digits() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(20_000), "20,000");
        assert_eq!(super::thousands(1_234_567), "1,234,567");
    }
}
