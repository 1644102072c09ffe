//! SASL/OAUTHBEARER ([RFC 7628]) as Kafka speaks it ([KIP-255], with the
//! SASL extensions of [KIP-342]), transport-free.
//!
//! The exchange is one message each way on success: the client sends
//! [`initial_response`] (`n,,` `\x01auth=Bearer <token>` then one
//! `\x01key=value` per extension, then `\x01\x01`) and the server answers
//! with an empty token. On failure the server answers with an error JSON
//! document (RFC 7628 §3.2.2: `status`, `scope`, `openid-configuration`); the
//! client must then send a lone `\x01` ([`FAILURE_ACK`]) and the server ends
//! the exchange with an authentication error. [`parse_server_error`] reads
//! that document into an [`OAuthBearerServerError`], bounded and safe on
//! hostile input.
//!
//! The token is a [`Secret`]: it never appears in an error or in `Debug`
//! output.
//!
//! [RFC 7628]: https://www.rfc-editor.org/rfc/rfc7628
//! [KIP-255]: https://cwiki.apache.org/confluence/pages/viewpage.action?pageId=75968876
//! [KIP-342]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-342%3A+Add+support+for+Custom+SASL+extensions+in+OAuthBearer+authentication

use std::fmt;

use super::SaslError;
use crate::secret::Secret;

/// The client's answer to a server error challenge: a lone `%x01` (RFC 7628
/// §3.2.3), after which the server fails the exchange.
pub const FAILURE_ACK: &[u8] = &[0x01];

/// The largest token accepted in an initial response (Kafka's own limit is
/// the frame size; JWTs from real providers are a few KiB).
pub const MAX_TOKEN_LEN: usize = 64 * 1024;

/// The largest server error document parsed.
pub const MAX_SERVER_ERROR_LEN: usize = 8 * 1024;

/// The most extensions accepted.
pub const MAX_EXTENSIONS: usize = 64;

/// Longest text kept from any one field of a server error document.
const MAX_FIELD_CHARS: usize = 512;

/// One SASL extension (KIP-342): a `key=value` pair sent after the token.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslExtension {
    key: String,
    value: String,
}

impl SaslExtension {
    /// Validates `key` and `value` per RFC 7628 §3.1: the key is one or more
    /// ASCII letters and not `auth` (reserved for the token), the value is
    /// visible ASCII, space, tab, CR or LF.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Result<Self, SaslError> {
        let (key, value) = (key.into(), value.into());
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(SaslError::InvalidInput {
                message: "an OAUTHBEARER extension key must be one or more ASCII letters",
            });
        }
        if key == "auth" {
            return Err(SaslError::InvalidInput {
                message: "the OAUTHBEARER extension key 'auth' is reserved for the token",
            });
        }
        if !value
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        {
            return Err(SaslError::InvalidInput {
                message: "an OAUTHBEARER extension value must be visible ASCII, space, tab, CR or LF",
            });
        }
        Ok(SaslExtension { key, value })
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The value.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Debug for SaslExtension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Extension values may carry tenant identifiers: shown, they are not
        // credentials (Kafka's broker logs them too).
        write!(f, "{}={:?}", self.key, self.value)
    }
}

/// Parses a comma-separated `key=value` list (the `sasl.oauthbearer.extensions`
/// syntax of librdkafka) into validated extensions. Empty entries are
/// skipped; a repeated key is refused.
pub fn parse_extensions(list: &str) -> Result<Vec<SaslExtension>, SaslError> {
    let mut out: Vec<SaslExtension> = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((key, value)) = entry.split_once('=') else {
            return Err(SaslError::InvalidInput {
                message: "an OAUTHBEARER extension must be written key=value",
            });
        };
        let ext = SaslExtension::new(key.trim(), value.trim())?;
        if out.iter().any(|e| e.key == ext.key) {
            return Err(SaslError::InvalidInput {
                message: "an OAUTHBEARER extension key is repeated",
            });
        }
        if out.len() == MAX_EXTENSIONS {
            return Err(SaslError::InvalidInput {
                message: "too many OAUTHBEARER extensions (at most 64)",
            });
        }
        out.push(ext);
    }
    Ok(out)
}

/// Whether `token` is an RFC 6750 `b64token`: `1*( ALPHA / DIGIT / "-" /
/// "." / "_" / "~" / "+" / "/" ) *"="`. A JWT always is.
fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/'))
}

/// The client's initial response (RFC 7628 §3.1, with no authorization
/// identity, as Kafka's Java client sends it): `n,,` `\x01auth=Bearer
/// <token>` `\x01key=value`… `\x01\x01`.
///
/// Refuses a token that is empty, longer than [`MAX_TOKEN_LEN`] or not a
/// `b64token` (which also keeps a separator byte out of the message), and
/// more than [`MAX_EXTENSIONS`] extensions.
pub fn initial_response(token: &Secret, extensions: &[SaslExtension]) -> Result<Vec<u8>, SaslError> {
    let token = token.expose();
    if token.len() > MAX_TOKEN_LEN {
        return Err(SaslError::InvalidInput {
            message: "the OAUTHBEARER token is longer than 64 KiB",
        });
    }
    if !is_b64token(token) {
        return Err(SaslError::InvalidInput {
            message: "the OAUTHBEARER token is empty or not a bearer token (RFC 6750 b64token)",
        });
    }
    if extensions.len() > MAX_EXTENSIONS {
        return Err(SaslError::InvalidInput {
            message: "too many OAUTHBEARER extensions (at most 64)",
        });
    }
    // Both bounded above: the token by MAX_TOKEN_LEN, the extensions by
    // their count (their sizes only grow the Vec as needed).
    let mut out = Vec::with_capacity(token.len().saturating_add(64));
    out.extend_from_slice(b"n,,\x01auth=Bearer ");
    out.extend_from_slice(token.as_bytes());
    out.push(0x01);
    for e in extensions {
        out.extend_from_slice(e.key.as_bytes());
        out.push(b'=');
        out.extend_from_slice(e.value.as_bytes());
        out.push(0x01);
    }
    out.push(0x01);
    Ok(out)
}

/// The error document an OAUTHBEARER server sends before failing the
/// exchange (RFC 7628 §3.2.2). Every field is the server's text, cut to 512
/// characters with control characters replaced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OAuthBearerServerError {
    /// `status`: the OAuth error code, e.g. `invalid_token`.
    pub status: String,
    /// `scope`: the scope the server required, if it said.
    pub scope: Option<String>,
    /// `openid-configuration`: where to discover the provider, if it said.
    pub openid_configuration: Option<String>,
}

impl fmt::Display for OAuthBearerServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "status {}", self.status)?;
        if let Some(scope) = &self.scope {
            write!(f, ", required scope {scope:?}")?;
        }
        if let Some(c) = &self.openid_configuration {
            write!(f, ", openid-configuration {c}")?;
        }
        Ok(())
    }
}

fn clean(s: &str) -> String {
    s.chars()
        .take(MAX_FIELD_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Reads the server's error document (the non-empty challenge that answers
/// a refused initial response). Bounded by [`MAX_SERVER_ERROR_LEN`]; a
/// document that is not a JSON object with a string `status` is
/// [`SaslError::Malformed`].
pub fn parse_server_error(challenge: &[u8]) -> Result<OAuthBearerServerError, SaslError> {
    if challenge.len() > MAX_SERVER_ERROR_LEN {
        return Err(SaslError::MessageTooLarge {
            length: challenge.len(),
            maximum: MAX_SERVER_ERROR_LEN,
        });
    }
    let value: serde_json::Value = serde_json::from_slice(challenge).map_err(|_| SaslError::Malformed {
        message: "the OAUTHBEARER server error is not JSON",
    })?;
    let serde_json::Value::Object(map) = value else {
        return Err(SaslError::Malformed {
            message: "the OAUTHBEARER server error is not a JSON object",
        });
    };
    let text = |key: &str| map.get(key).and_then(|v| v.as_str()).map(clean);
    let status = text("status").ok_or(SaslError::Malformed {
        message: "the OAUTHBEARER server error has no string 'status'",
    })?;
    Ok(OAuthBearerServerError {
        status,
        scope: text("scope"),
        openid_configuration: text("openid-configuration"),
    })
}

/// What the server's answer to the initial response means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerReply {
    /// An empty answer: authenticated.
    Success,
    /// An error document: send [`FAILURE_ACK`], the server then fails the
    /// exchange. The document, or why it could not be read.
    Failure(Result<OAuthBearerServerError, SaslError>),
}

/// Classifies the server's answer to the initial response.
pub fn handle_server_reply(reply: &[u8]) -> ServerReply {
    if reply.is_empty() {
        ServerReply::Success
    } else {
        ServerReply::Failure(parse_server_error(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const JWT: &str = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";

    #[test]
    fn initial_response_layout() {
        let token = Secret::new(JWT);
        assert_eq!(
            initial_response(&token, &[]).unwrap(),
            format!("n,,\x01auth=Bearer {JWT}\x01\x01").into_bytes()
        );
        let ext = parse_extensions("traceId=123, logicalCluster = lkc-1 ").unwrap();
        assert_eq!(
            initial_response(&token, &ext).unwrap(),
            format!("n,,\x01auth=Bearer {JWT}\x01traceId=123\x01logicalCluster=lkc-1\x01\x01").into_bytes()
        );
    }

    #[test]
    fn tokens_are_validated_without_echoing_them() {
        for bad in ["", "a b", "abc\x01auth=x", "==", "tok\u{e9}n", "a=b"] {
            let err = initial_response(&Secret::new(bad), &[]).unwrap_err();
            assert!(matches!(err, SaslError::InvalidInput { .. }), "{bad:?}: {err:?}");
            if bad.len() > 4 {
                assert!(!err.to_string().contains(bad), "{err}");
            }
        }
        assert!(initial_response(&Secret::new("abc=="), &[]).is_ok());
        let long = "a".repeat(MAX_TOKEN_LEN + 1);
        assert!(initial_response(&Secret::new(long), &[]).is_err());
    }

    #[test]
    fn extensions_are_validated() {
        for (key, value) in [
            ("", "v"),
            ("auth", "v"),
            ("a1", "v"),
            ("a-b", "v"),
            ("k", "\x01"),
            ("k", "\u{e9}"),
        ] {
            assert!(SaslExtension::new(key, value).is_err(), "{key:?}={value:?}");
        }
        assert!(SaslExtension::new("Auth", "ok value\t").is_ok());
        assert!(parse_extensions("a=1,a=2").is_err());
        assert!(parse_extensions("novalue").is_err());
        assert_eq!(parse_extensions(" , ").unwrap(), vec![]);
        let many: Vec<String> = (0..=MAX_EXTENSIONS)
            .map(|i| {
                let key: String = format!("{i}").bytes().map(|b| (b'a' + (b - b'0')) as char).collect();
                format!("k{key}=v")
            })
            .collect();
        assert!(parse_extensions(&many.join(",")).is_err());
        assert_eq!(
            parse_extensions(&many[..MAX_EXTENSIONS].join(",")).unwrap().len(),
            MAX_EXTENSIONS
        );
    }

    #[test]
    fn server_error_documents() {
        assert_eq!(handle_server_reply(b""), ServerReply::Success);
        let doc = br#"{"status":"invalid_token","scope":"kafka","openid-configuration":"https://idp/.well-known"}"#;
        let ServerReply::Failure(Ok(e)) = handle_server_reply(doc) else {
            panic!("a failure");
        };
        assert_eq!(e.status, "invalid_token");
        assert_eq!(e.scope.as_deref(), Some("kafka"));
        assert_eq!(
            e.to_string(),
            "status invalid_token, required scope \"kafka\", openid-configuration https://idp/.well-known"
        );
        assert_eq!(
            parse_server_error(br#"{"status":"invalid_token"}"#)
                .unwrap()
                .to_string(),
            "status invalid_token"
        );
        for bad in [&b"not json"[..], b"[]", b"{}", br#"{"status":1}"#, b"\xff\xfe"] {
            assert!(
                matches!(parse_server_error(bad), Err(SaslError::Malformed { .. })),
                "{bad:?}"
            );
        }
        let big = vec![b' '; MAX_SERVER_ERROR_LEN + 1];
        assert!(matches!(
            parse_server_error(&big),
            Err(SaslError::MessageTooLarge { .. })
        ));
        let long = format!(r#"{{"status":"{}\n"}}"#, "x".repeat(4000));
        let e = parse_server_error(long.as_bytes()).unwrap();
        assert_eq!(e.status.chars().count(), MAX_FIELD_CHARS);
        let ctl = parse_server_error(br#"{"status":"a\nb\u0000"}"#).unwrap();
        assert_eq!(ctl.status, "a?b?");
        // Deep nesting stops at serde_json's recursion limit, with an error.
        let deep = format!(r#"{{"status":"x","d":{}{}}}"#, "[".repeat(2000), "]".repeat(2000));
        assert!(parse_server_error(deep.as_bytes()).is_err());
    }

    #[test]
    fn debug_never_shows_the_token() {
        let token = Secret::new(JWT);
        assert!(!format!("{token:?}").contains("eyJ"));
    }

    proptest! {
        #[test]
        fn any_reply_is_classified_without_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = handle_server_reply(&data);
        }

        #[test]
        fn valid_inputs_round_trip(
            token in "[A-Za-z0-9._~+/-]{1,200}={0,2}",
            ext in proptest::collection::vec(("[A-Za-z]{1,12}", "[ -~\t]{0,40}"), 0..6),
        ) {
            let mut exts: Vec<SaslExtension> = Vec::new();
            for (k, v) in ext {
                if k != "auth" && !exts.iter().any(|e| e.key() == k) {
                    exts.push(SaslExtension::new(k, v).unwrap());
                }
            }
            let msg = initial_response(&Secret::new(token.clone()), &exts).unwrap();
            // Parse it back the way a server would.
            let text = std::str::from_utf8(&msg).unwrap();
            let rest = text.strip_prefix("n,,\x01").unwrap().strip_suffix("\x01\x01").unwrap();
            let mut parts = rest.split('\x01');
            prop_assert_eq!(parts.next().unwrap(), format!("auth=Bearer {token}"));
            let back: Vec<(String, String)> = parts
                .map(|p| { let (k, v) = p.split_once('=').unwrap(); (k.to_owned(), v.to_owned()) })
                .collect();
            let want: Vec<(String, String)> =
                exts.iter().map(|e| (e.key().to_owned(), e.value().to_owned())).collect();
            prop_assert_eq!(back, want);
        }

        #[test]
        fn any_extension_input_is_checked_without_panic(k in ".{0,20}", v in ".{0,20}") {
            if let Ok(e) = SaslExtension::new(k, v) {
                prop_assert!(e.key().bytes().all(|b| b.is_ascii_alphabetic()));
                prop_assert!(!e.value().contains('\x01'));
            }
        }
    }
}
