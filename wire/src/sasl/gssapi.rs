//! SASL GSSAPI (Kerberos V5) client exchange, [RFC 4752], transport-free.
//!
//! The Kerberos work (tickets, the AP-REQ / AP-REP, per-message tokens) is
//! behind the [`GssContext`] trait; this module drives the SASL layer on top
//! of it:
//!
//! 1. [`GssapiClient::initial_response`]: the first context token (AP-REQ).
//! 2. [`GssapiClient::handle_server`] with each server token: passed back to
//!    the context until it is established; the context's output (possibly
//!    empty) is sent to the server.
//! 3. Security-layer negotiation: the server's wrapped 4-byte message
//!    (offered layers, maximum message size) is unwrapped; the client
//!    answers, wrapped, with layer 1 ("no security layer"), a maximum size of
//!    0 and the authorization identity. The exchange is then complete.
//!
//! Every server token is bounded ([`MAX_GSSAPI_TOKEN`]) before it is handed
//! to the context, and hostile bytes yield a [`SaslError`], never a panic.
//!
//! [RFC 4752]: https://www.rfc-editor.org/rfc/rfc4752

use std::fmt;

use super::SaslError;

/// The largest server token accepted (Kerberos tokens are a few KiB).
pub const MAX_GSSAPI_TOKEN: usize = 64 * 1024;

/// The largest authorization identity accepted.
pub const MAX_AUTHZ_ID: usize = 1024;

/// RFC 4752 security-layer bit: no security layer.
pub const LAYER_NONE: u8 = 1;

/// The result of one `init_sec_context` step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GssStep {
    /// The token to send to the server (may be empty).
    pub token: Vec<u8>,
    /// Whether the security context is now established.
    pub complete: bool,
}

/// A GSS-API initiator security context (Kerberos V5 mechanism).
///
/// Implementations must not put key material in errors.
pub trait GssContext {
    /// One `init_sec_context` step: `input` is `None` for the first call,
    /// then each server token.
    fn step(&mut self, input: Option<&[u8]>) -> Result<GssStep, SaslError>;
    /// `gss_wrap` without confidentiality (integrity only).
    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, SaslError>;
    /// `gss_unwrap`: verifies a server token and returns its payload.
    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, SaslError>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Context,
    Negotiate,
    Done,
    Failed,
}

/// Client side of the SASL GSSAPI mechanism over a [`GssContext`].
pub struct GssapiClient<C> {
    context: C,
    authz_id: String,
    state: State,
}

impl<C> fmt::Debug for GssapiClient<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GssapiClient")
            .field("authz_id", &self.authz_id)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<C: GssContext> GssapiClient<C> {
    /// A client that will request `authz_id` (empty: the authenticated
    /// principal itself, which is what Kafka expects).
    pub fn new(context: C, authz_id: &str) -> Result<Self, SaslError> {
        if authz_id.len() > MAX_AUTHZ_ID {
            return Err(SaslError::InvalidInput {
                message: "GSSAPI authorization id is longer than 1024 bytes",
            });
        }
        Ok(GssapiClient {
            context,
            authz_id: authz_id.to_owned(),
            state: State::Start,
        })
    }

    /// The first token to send (the Kerberos AP-REQ).
    pub fn initial_response(&mut self) -> Result<Vec<u8>, SaslError> {
        if self.state != State::Start {
            return Err(SaslError::OutOfOrder);
        }
        self.state = State::Failed;
        let step = self.context.step(None)?;
        self.state = if step.complete {
            State::Negotiate
        } else {
            State::Context
        };
        Ok(step.token)
    }

    /// Handles one server token and returns the response to send. After the
    /// security-layer answer is returned, [`is_complete`](Self::is_complete)
    /// is true and no further server token is expected.
    pub fn handle_server(&mut self, message: &[u8]) -> Result<Vec<u8>, SaslError> {
        if message.len() > MAX_GSSAPI_TOKEN {
            self.state = State::Failed;
            return Err(SaslError::MessageTooLarge {
                length: message.len(),
                maximum: MAX_GSSAPI_TOKEN,
            });
        }
        let state = self.state;
        self.state = State::Failed;
        match state {
            State::Context => {
                let step = self.context.step(Some(message))?;
                self.state = if step.complete {
                    State::Negotiate
                } else {
                    State::Context
                };
                Ok(step.token)
            }
            State::Negotiate => {
                let offer = self.context.unwrap(message)?;
                let answer = negotiate(&offer, &self.authz_id)?;
                let wrapped = self.context.wrap(&answer)?;
                self.state = State::Done;
                Ok(wrapped)
            }
            State::Start | State::Done | State::Failed => Err(SaslError::OutOfOrder),
        }
    }

    /// Whether the exchange completed successfully.
    pub fn is_complete(&self) -> bool {
        self.state == State::Done
    }

    /// The underlying context (e.g. to read the session's identity).
    pub fn context(&self) -> &C {
        &self.context
    }
}

/// Builds the client's security-layer answer to the server's unwrapped
/// offer: RFC 4752 section 3.1.
pub fn negotiate(offer: &[u8], authz_id: &str) -> Result<Vec<u8>, SaslError> {
    let [layers, _, _, _] = offer else {
        return Err(SaslError::Malformed {
            message: "GSSAPI security-layer offer is not 4 bytes",
        });
    };
    if layers & LAYER_NONE == 0 {
        return Err(SaslError::Malformed {
            message: "GSSAPI server does not offer \"no security layer\"",
        });
    }
    let mut out = Vec::with_capacity(authz_id.len().saturating_add(4));
    out.extend_from_slice(&[LAYER_NONE, 0, 0, 0]);
    out.extend_from_slice(authz_id.as_bytes());
    Ok(out)
}

/// A scripted context for tests and fuzzing: the context completes after
/// `rounds` server tokens each equal to `b"srv"`; `wrap` prefixes `W`,
/// `unwrap` requires and strips a `W` prefix.
#[cfg(any(fuzzing, test))]
#[derive(Debug)]
pub struct ScriptedContext {
    /// Server tokens still needed before the context completes.
    pub rounds: usize,
}

#[cfg(any(fuzzing, test))]
impl GssContext for ScriptedContext {
    fn step(&mut self, input: Option<&[u8]>) -> Result<GssStep, SaslError> {
        match input {
            None => Ok(GssStep {
                token: b"ap-req".to_vec(),
                complete: self.rounds == 0,
            }),
            Some(b"srv") if self.rounds > 0 => {
                self.rounds -= 1;
                Ok(GssStep {
                    token: Vec::new(),
                    complete: self.rounds == 0,
                })
            }
            Some(_) => Err(SaslError::Malformed {
                message: "unexpected context token",
            }),
        }
    }

    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, SaslError> {
        let mut out = vec![b'W'];
        out.extend_from_slice(message);
        Ok(out)
    }

    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, SaslError> {
        match token.split_first() {
            Some((b'W', rest)) => Ok(rest.to_vec()),
            _ => Err(SaslError::Malformed {
                message: "bad wrap token",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_exchange_with_one_round() {
        let mut c = GssapiClient::new(ScriptedContext { rounds: 1 }, "").unwrap();
        assert_eq!(c.initial_response().unwrap(), b"ap-req");
        assert_eq!(c.handle_server(b"srv").unwrap(), b"");
        assert!(!c.is_complete());
        let answer = c.handle_server(b"W\x07\x00\x10\x00").unwrap();
        assert_eq!(answer, b"W\x01\x00\x00\x00");
        assert!(c.is_complete());
        assert_eq!(c.handle_server(b""), Err(SaslError::OutOfOrder));
    }

    #[test]
    fn authz_id_is_appended() {
        let mut c = GssapiClient::new(ScriptedContext { rounds: 0 }, "alice").unwrap();
        c.initial_response().unwrap();
        assert_eq!(
            c.handle_server(b"W\x01\x00\x00\x00").unwrap(),
            b"W\x01\x00\x00\x00alice"
        );
    }

    #[test]
    fn refusals() {
        // Layer offer without "no security layer".
        let mut c = GssapiClient::new(ScriptedContext { rounds: 0 }, "").unwrap();
        c.initial_response().unwrap();
        assert!(matches!(
            c.handle_server(b"W\x04\x00\x00\x00"),
            Err(SaslError::Malformed { .. })
        ));
        assert_eq!(c.handle_server(b"W\x01\x00\x00\x00"), Err(SaslError::OutOfOrder));
        // Wrong length.
        for bad in [
            &b"W"[..],
            b"W\x01\x00\x00",
            b"W\x01\x00\x00\x00\x00",
            b"x\x01\x00\x00\x00",
        ] {
            let mut c = GssapiClient::new(ScriptedContext { rounds: 0 }, "").unwrap();
            c.initial_response().unwrap();
            assert!(c.handle_server(bad).is_err());
            assert!(!c.is_complete());
        }
        // Oversized token.
        let mut c = GssapiClient::new(ScriptedContext { rounds: 1 }, "").unwrap();
        c.initial_response().unwrap();
        let big = vec![0u8; MAX_GSSAPI_TOKEN + 1];
        assert!(matches!(c.handle_server(&big), Err(SaslError::MessageTooLarge { .. })));
        // Out of order.
        let mut c = GssapiClient::new(ScriptedContext { rounds: 1 }, "").unwrap();
        assert_eq!(c.handle_server(b"srv"), Err(SaslError::OutOfOrder));
        let mut c = GssapiClient::new(ScriptedContext { rounds: 1 }, "").unwrap();
        c.initial_response().unwrap();
        assert_eq!(c.initial_response(), Err(SaslError::OutOfOrder));
        // Long authz id.
        assert!(GssapiClient::new(ScriptedContext { rounds: 0 }, &"a".repeat(MAX_AUTHZ_ID + 1)).is_err());
    }
}
