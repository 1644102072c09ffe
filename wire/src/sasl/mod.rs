//! SASL client mechanisms for Kafka, transport-free.
//!
//! Kafka wraps SASL tokens in `SaslHandshake` / `SaslAuthenticate` requests
//! ([KIP-43], [KIP-152]); this module only produces and consumes the token
//! bytes, so the caller owns the I/O and the Kafka framing.
//!
//! * [`plain_initial_response`]: SASL/PLAIN ([RFC 4616]), a single message.
//! * [`ScramClient`]: SCRAM-SHA-256 and SCRAM-SHA-512 ([RFC 5802], [RFC 7677],
//!   Kafka's [KIP-84]), including the `tokenauth=true` extension Kafka uses
//!   for delegation tokens ([KIP-48]).
//! * [`oauthbearer`]: SASL/OAUTHBEARER ([RFC 7628]) with KIP-342 extensions.
//!
//! * [`GssapiClient`]: GSSAPI / Kerberos V5 ([RFC 4752]) over a
//!   [`GssContext`]; with [`keytab`] (MIT keytab files) and [`kdc_frame`]
//!   (Kerberos over TCP framing) for the context's implementation.
//!
//! The module is sans-IO and draws no random numbers: the SCRAM client nonce
//! is supplied by the caller (see [`nonce_from_random_bytes`]).
//!
//! No error or `Debug` output contains a password or a key derived from one.
//! Hostile server input yields a [`SaslError`], never a panic.
//!
//! [RFC 4752]: https://www.rfc-editor.org/rfc/rfc4752
//! [RFC 4616]: https://www.rfc-editor.org/rfc/rfc4616
//! [RFC 5802]: https://www.rfc-editor.org/rfc/rfc5802
//! [RFC 7677]: https://www.rfc-editor.org/rfc/rfc7677
//! [RFC 7628]: https://www.rfc-editor.org/rfc/rfc7628
//! [KIP-43]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-43%3A+Kafka+SASL+enhancements
//! [KIP-48]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-48+Delegation+token+support+for+Kafka
//! [KIP-84]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-84%3A+Support+SASL+SCRAM+mechanisms
//! [KIP-152]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-152+-+Improve+diagnostics+for+SASL+authentication+failures

use std::fmt;
use std::str::FromStr;

pub mod gssapi;
pub mod kdc_frame;
pub mod keytab;
pub mod krb_wrap;
pub mod oauthbearer;
mod plain;
mod scram;

pub use gssapi::{GssContext, GssStep, GssapiClient};
pub use plain::plain_initial_response;
pub use scram::{nonce_from_random_bytes, ScramClient};

/// A SASL mechanism this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN` (RFC 4616).
    Plain,
    /// `SCRAM-SHA-256` (RFC 7677).
    ScramSha256,
    /// `SCRAM-SHA-512` (KIP-84).
    ScramSha512,
    /// `OAUTHBEARER` (RFC 7628, KIP-255): see [`oauthbearer`].
    OAuthBearer,
    /// `GSSAPI` (Kerberos V5, RFC 4752).
    Gssapi,
}

impl SaslMechanism {
    /// The IANA / Kafka name, as sent in `SaslHandshakeRequest`.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
            SaslMechanism::Gssapi => "GSSAPI",
        }
    }

    /// Whether this is one of the SCRAM mechanisms handled by [`ScramClient`].
    pub fn is_scram(self) -> bool {
        matches!(self, SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512)
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SaslMechanism {
    type Err = SaslError;

    /// Parses a mechanism name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            SaslMechanism::Plain,
            SaslMechanism::ScramSha256,
            SaslMechanism::ScramSha512,
            SaslMechanism::OAuthBearer,
            SaslMechanism::Gssapi,
        ]
        .into_iter()
        .find(|m| m.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| SaslError::UnknownMechanism(s.to_owned()))
    }
}

/// Why a SASL exchange failed or could not start.
///
/// Never contains a password or derived key.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslError {
    /// The mechanism name is not one this crate supports.
    #[error("unknown SASL mechanism {0:?}; expected one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI")]
    UnknownMechanism(String),
    /// A caller-supplied value (user name, password, nonce, mechanism) is not
    /// usable with the mechanism.
    #[error("invalid SASL input: {message}")]
    InvalidInput {
        /// What is wrong.
        message: &'static str,
    },
    /// The server's nonce does not start with and extend the client's nonce.
    #[error("SCRAM server nonce does not extend the client nonce")]
    NonceMismatch,
    /// The server asked for fewer PBKDF2 iterations than the allowed minimum.
    #[error("SCRAM iteration count {iterations} is below the minimum {minimum}")]
    IterationCountTooLow {
        /// The count the server sent.
        iterations: u64,
        /// The smallest accepted count.
        minimum: u32,
    },
    /// The server asked for more PBKDF2 iterations than the client allows
    /// (protection against CPU exhaustion by a hostile server).
    #[error("SCRAM iteration count {iterations} is above the maximum {maximum}")]
    IterationCountTooHigh {
        /// The count the server sent (saturated at `u64::MAX`).
        iterations: u64,
        /// The largest accepted count.
        maximum: u32,
    },
    /// The server's signature did not verify: it does not know the password.
    #[error("SCRAM server signature mismatch")]
    ServerSignatureMismatch,
    /// The server reported an error (`e=` attribute); the text is the server's.
    #[error("SASL server error: {0}")]
    ServerError(String),
    /// A server message longer than the accepted bound.
    #[error("SASL message of {length} bytes exceeds the maximum of {maximum}")]
    MessageTooLarge {
        /// Length received.
        length: usize,
        /// Maximum accepted.
        maximum: usize,
    },
    /// A server message that is not valid for the mechanism: bad syntax,
    /// invalid UTF-8 or base64, missing or misplaced attributes.
    #[error("malformed SASL message: {message}")]
    Malformed {
        /// What is wrong.
        message: &'static str,
    },
    /// A call made in the wrong state, or after the exchange completed or
    /// failed.
    #[error("SASL step called out of order")]
    OutOfOrder,
}

/// Entry points for fuzz targets (`cargo fuzz`, built with `--cfg fuzzing`).
#[cfg(any(fuzzing, test))]
pub mod fuzzing {
    use super::{SaslMechanism, ScramClient};
    use crate::secret::Secret;

    /// The fixed client nonce the harness uses; a fuzzer that learns to
    /// start server-first with `r=` + this reaches the PBKDF2 path.
    pub const CLIENT_NONCE: &str = "fyko+d2lbbFgONRv9qkxdawL";

    /// Drives a [`ScramClient`] for each SCRAM mechanism: `data` up to the
    /// first `0xFF` byte is fed to `handle_server_first`, the rest (if any)
    /// to `handle_server_final`. Iterations are capped at the 4096 minimum
    /// so each run costs at most one cheap PBKDF2. Must never panic.
    pub fn scram_server_messages(data: &[u8]) {
        let (first, last) = match data.iter().position(|&b| b == 0xFF) {
            Some(i) => (&data[..i], Some(&data[i + 1..])),
            None => (data, None),
        };
        let password = Secret::new("pencil");
        for mechanism in [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512] {
            // The fixed inputs are valid, so these two steps always succeed;
            // the unit tests guard that.
            let Ok(client) = ScramClient::new(mechanism, "user", &password, CLIENT_NONCE) else {
                continue;
            };
            let mut client = client.with_max_iterations(ScramClient::MIN_ITERATIONS);
            if client.client_first().is_err() {
                continue;
            }
            let first_ok = client.handle_server_first(first).is_ok();
            if let Some(last) = last {
                let result = client.handle_server_final(last);
                // A final message can only succeed after a valid first one.
                assert!(first_ok || result.is_err());
            }
            let _ = client.is_complete();
            let _ = format!("{client:?}");
        }
    }

    /// Drives the OAUTHBEARER client: `data` is the server's reply to the
    /// initial response; its first bytes up to `0xFF` are also tried as an
    /// extension list and as a token. Must never panic.
    pub fn oauthbearer(data: &[u8]) {
        use super::oauthbearer::{handle_server_reply, initial_response, parse_extensions, ServerReply};
        if let ServerReply::Failure(Ok(e)) = handle_server_reply(data) {
            let _ = e.to_string();
        }
        let head = match data.iter().position(|&b| b == 0xFF) {
            Some(i) => &data[..i],
            None => data,
        };
        if let Ok(text) = std::str::from_utf8(head) {
            let extensions = parse_extensions(text).unwrap_or_default();
            let token = Secret::new(text);
            if let Ok(msg) = initial_response(&token, &extensions) {
                assert!(msg.starts_with(b"n,,\x01auth=Bearer ") && msg.ends_with(b"\x01\x01"));
            }
            let _ = initial_response(&Secret::new("abc.def.ghi"), &extensions);
        }
    }

    /// Drives a [`GssapiClient`](super::GssapiClient) over a scripted
    /// context: `data[0] % 4` is the number of context rounds, the rest is
    /// split at `0xFF` bytes into server messages. Must never panic.
    pub fn gssapi_server_messages(data: &[u8]) {
        use super::gssapi::{GssapiClient, ScriptedContext};
        let Some((&rounds, rest)) = data.split_first() else {
            return;
        };
        let context = ScriptedContext {
            rounds: usize::from(rounds % 4),
        };
        let Ok(mut client) = GssapiClient::new(context, "") else {
            return;
        };
        if client.initial_response().is_err() {
            return;
        }
        for message in rest.split(|&b| b == 0xFF) {
            let was_complete = client.is_complete();
            let result = client.handle_server(message);
            assert!(!was_complete || result.is_err());
            let _ = format!("{client:?}");
        }
        // The same bytes as a buffered KDC reply.
        let _ = super::kdc_frame::kdc_reply_body(data);
        // The same bytes as an acceptor's wrap token (checksum: a fixed stand-in).
        let _ = super::krb_wrap::unwrap_acceptor(data, |_, _| Ok(vec![0; 12]));
        // The same bytes as a keytab file.
        if let Ok(entries) = super::keytab::parse_keytab(data) {
            for e in entries {
                let _ = (e.principal(), format!("{e:?}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanism_names_round_trip() {
        for (m, name) in [
            (SaslMechanism::Plain, "PLAIN"),
            (SaslMechanism::ScramSha256, "SCRAM-SHA-256"),
            (SaslMechanism::ScramSha512, "SCRAM-SHA-512"),
            (SaslMechanism::OAuthBearer, "OAUTHBEARER"),
            (SaslMechanism::Gssapi, "GSSAPI"),
        ] {
            assert_eq!(m.name(), name);
            assert_eq!(m.to_string(), name);
            assert_eq!(name.parse::<SaslMechanism>(), Ok(m));
            assert_eq!(name.to_ascii_lowercase().parse::<SaslMechanism>(), Ok(m));
        }
        assert_eq!("Scram-Sha-512".parse(), Ok(SaslMechanism::ScramSha512));
        assert!(!SaslMechanism::Plain.is_scram());
        assert!(SaslMechanism::ScramSha256.is_scram() && SaslMechanism::ScramSha512.is_scram());
    }

    #[test]
    fn unknown_mechanism_lists_allowed_values() {
        for bad in ["SCRAM-SHA-1", "", " PLAIN", "SCRAM_SHA_256"] {
            let err = bad.parse::<SaslMechanism>().unwrap_err();
            assert_eq!(err, SaslError::UnknownMechanism(bad.to_owned()));
            let text = err.to_string();
            for allowed in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
                assert!(text.contains(allowed), "{text}");
            }
        }
    }
}
