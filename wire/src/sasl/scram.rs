//! SCRAM-SHA-256 / SCRAM-SHA-512 client ([RFC 5802], [RFC 7677], [KIP-84]).
//!
//! A transport-free state machine: [`ScramClient::client_first`] →
//! [`ScramClient::handle_server_first`] → [`ScramClient::handle_server_final`].
//! Any error, and any call in the wrong state, ends the exchange; every later
//! call returns [`SaslError::OutOfOrder`].
//!
//! Like Kafka's Java client, no SASLprep is applied: the password is hashed as
//! its UTF-8 bytes and the user name is only `=`/`,` escaped. Channel binding
//! is not supported (`n,,` GS2 header, `c=biws`), and the authorization id is
//! always empty, as Kafka expects.
//!
//! [RFC 5802]: https://www.rfc-editor.org/rfc/rfc5802
//! [RFC 7677]: https://www.rfc-editor.org/rfc/rfc7677
//! [KIP-84]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-84%3A+Support+SASL+SCRAM+mechanisms

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::{SaslError, SaslMechanism};
use crate::secret::Secret;

/// GS2 header without channel binding or authzid.
const GS2_HEADER: &str = "n,,";
/// `base64("n,,")`, the channel-binding attribute of client-final.
const CHANNEL_BINDING: &str = "biws";

/// Makes a SCRAM client nonce from caller-supplied random bytes (standard
/// base64, which contains only printable characters and no `,`).
///
/// The crate is sans-IO and draws no randomness itself: pass at least 16
/// bytes from a cryptographically secure generator. Empty input gives an
/// empty string, which [`ScramClient::new`] rejects.
pub fn nonce_from_random_bytes(random: &[u8]) -> String {
    BASE64.encode(random)
}

#[derive(Clone, Copy)]
enum HashAlg {
    Sha256,
    Sha512,
}

enum State {
    Initial {
        password: Secret,
    },
    AwaitingServerFirst {
        password: Secret,
        client_first_bare: String,
    },
    AwaitingServerFinal {
        server_signature: Vec<u8>,
    },
    Done,
    Failed,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Initial { .. } => "Initial",
            State::AwaitingServerFirst { .. } => "AwaitingServerFirst",
            State::AwaitingServerFinal { .. } => "AwaitingServerFinal",
            State::Done => "Done",
            State::Failed => "Failed",
        }
    }
}

/// Client side of one SCRAM-SHA-256 or SCRAM-SHA-512 exchange.
///
/// The RFC 7677 example exchange (in real use the nonce comes from
/// [`nonce_from_random_bytes`] over OS randomness):
///
/// ```
/// use clink_kafka_wire::sasl::{SaslMechanism, ScramClient};
/// use clink_kafka_wire::secret::Secret;
///
/// let mut scram = ScramClient::new(SaslMechanism::ScramSha256, "user", &Secret::new("pencil"), "rOprNGfwEbeRWgbNEkqO")?;
/// assert_eq!(scram.client_first()?, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
/// let client_final = scram.handle_server_first(
///     b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
/// )?;
/// assert!(client_final.ends_with(b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="));
/// // The server's signature is verified (in constant time) before success.
/// scram.handle_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")?;
/// assert!(scram.is_complete());
/// # Ok::<(), clink_kafka_wire::sasl::SaslError>(())
/// ```
pub struct ScramClient {
    mechanism: SaslMechanism,
    hash: HashAlg,
    username: String,
    client_nonce: String,
    token_auth: bool,
    max_iterations: u32,
    state: State,
}

impl ScramClient {
    /// Smallest PBKDF2 iteration count accepted from a server (RFC 7677 and
    /// Kafka both use 4096).
    pub const MIN_ITERATIONS: u32 = 4096;
    /// Default largest iteration count accepted from a server, so a hostile
    /// server cannot make the client spin for minutes.
    pub const DEFAULT_MAX_ITERATIONS: u32 = 1_000_000;
    /// Longest server message processed; longer ones are rejected unread.
    pub const MAX_MESSAGE_LEN: usize = 64 * 1024;

    /// Starts an exchange.
    ///
    /// `client_nonce` must be non-empty printable ASCII without `,`
    /// (RFC 5802 `printable`); build it with [`nonce_from_random_bytes`].
    /// `username` must be non-empty and free of NUL bytes. `mechanism` must
    /// be a SCRAM mechanism. Violations give [`SaslError::InvalidInput`].
    pub fn new(
        mechanism: SaslMechanism,
        username: &str,
        password: &Secret,
        client_nonce: impl Into<String>,
    ) -> Result<Self, SaslError> {
        let hash = match mechanism {
            SaslMechanism::ScramSha256 => HashAlg::Sha256,
            SaslMechanism::ScramSha512 => HashAlg::Sha512,
            _ => {
                return Err(invalid("mechanism is not a SCRAM mechanism"));
            }
        };
        if username.is_empty() {
            return Err(invalid("SCRAM user name is empty"));
        }
        if username.contains('\0') {
            return Err(invalid("SCRAM user name contains a NUL byte"));
        }
        let client_nonce = client_nonce.into();
        if client_nonce.is_empty() {
            return Err(invalid("SCRAM client nonce is empty"));
        }
        if !is_printable(&client_nonce) {
            return Err(invalid("SCRAM client nonce must be printable ASCII without ','"));
        }
        Ok(ScramClient {
            mechanism,
            hash,
            username: username.to_owned(),
            client_nonce,
            token_auth: false,
            max_iterations: Self::DEFAULT_MAX_ITERATIONS,
            state: State::Initial {
                password: password.clone(),
            },
        })
    }

    /// Adds Kafka's `tokenauth=true` extension to client-first, for
    /// authenticating with a delegation token (token id as user name, token
    /// HMAC as password). Set it before [`client_first`](Self::client_first).
    pub fn with_token_auth(mut self, enabled: bool) -> Self {
        self.token_auth = enabled;
        self
    }

    /// Changes the largest iteration count accepted from the server
    /// (default [`DEFAULT_MAX_ITERATIONS`](Self::DEFAULT_MAX_ITERATIONS)).
    /// Counts below [`MIN_ITERATIONS`](Self::MIN_ITERATIONS) are refused
    /// regardless.
    pub fn with_max_iterations(mut self, max_iterations: u32) -> Self {
        self.max_iterations = max_iterations;
        self
    }

    /// The mechanism this client speaks.
    pub fn mechanism(&self) -> SaslMechanism {
        self.mechanism
    }

    /// Whether the exchange finished and the server proved it knows the
    /// password.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// The client-first message, `n,,n=<user>,r=<nonce>[,tokenauth=true]`.
    pub fn client_first(&mut self) -> Result<Vec<u8>, SaslError> {
        match self.take_state() {
            State::Initial { password } => {
                // A capacity hint only: none (0) if the sum would overflow.
                let capacity = [self.username.len(), self.client_nonce.len()]
                    .into_iter()
                    .try_fold(32usize, usize::checked_add)
                    .unwrap_or(0);
                let mut bare = String::with_capacity(capacity);
                bare.push_str("n=");
                push_saslname(&mut bare, &self.username);
                bare.push_str(",r=");
                bare.push_str(&self.client_nonce);
                if self.token_auth {
                    bare.push_str(",tokenauth=true");
                }
                let message = format!("{GS2_HEADER}{bare}").into_bytes();
                self.state = State::AwaitingServerFirst {
                    password,
                    client_first_bare: bare,
                };
                Ok(message)
            }
            other => Err(self.out_of_order(other)),
        }
    }

    /// Consumes server-first (`r=…,s=…,i=…`) and returns client-final
    /// (`c=biws,r=…,p=…`).
    pub fn handle_server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, SaslError> {
        match self.take_state() {
            State::AwaitingServerFirst {
                password,
                client_first_bare,
            } => {
                let text = message_text(msg)?;
                let server_first = parse_server_first(text, &self.client_nonce, self.max_iterations)?;
                let without_proof = format!("c={CHANNEL_BINDING},r={}", server_first.nonce);
                let auth_message = format!("{client_first_bare},{text},{without_proof}");
                let password = password.expose().as_bytes();
                let keys = match self.hash {
                    HashAlg::Sha256 => derive_keys::<Sha256>(
                        password,
                        &server_first.salt,
                        server_first.iterations,
                        auth_message.as_bytes(),
                    ),
                    HashAlg::Sha512 => derive_keys::<Sha512>(
                        password,
                        &server_first.salt,
                        server_first.iterations,
                        auth_message.as_bytes(),
                    ),
                }
                .ok_or(invalid("HMAC rejected a key"))?;
                let message = format!("{without_proof},p={}", BASE64.encode(&keys.client_proof));
                self.state = State::AwaitingServerFinal {
                    server_signature: keys.server_signature,
                };
                Ok(message.into_bytes())
            }
            other => Err(self.out_of_order(other)),
        }
    }

    /// Consumes server-final: `v=<signature>` is verified (in constant
    /// time), `e=<text>` becomes [`SaslError::ServerError`].
    pub fn handle_server_final(&mut self, msg: &[u8]) -> Result<(), SaslError> {
        match self.take_state() {
            State::AwaitingServerFinal { server_signature } => {
                let text = message_text(msg)?;
                let first = text.split(',').next().unwrap_or_default();
                if let Some(error) = first.strip_prefix("e=") {
                    return Err(SaslError::ServerError(error.to_owned()));
                }
                let Some(verifier) = first.strip_prefix("v=") else {
                    return Err(malformed("server-final lacks a v= or e= attribute"));
                };
                let received = BASE64
                    .decode(verifier)
                    .map_err(|_| malformed("server signature is not valid base64"))?;
                if received.is_empty() {
                    return Err(malformed("server signature is empty"));
                }
                if bool::from(received.as_slice().ct_eq(server_signature.as_slice())) {
                    self.state = State::Done;
                    Ok(())
                } else {
                    Err(SaslError::ServerSignatureMismatch)
                }
            }
            other => Err(self.out_of_order(other)),
        }
    }

    /// Takes the state, leaving `Failed` behind: a step that returns early
    /// with an error thereby ends the exchange.
    fn take_state(&mut self) -> State {
        std::mem::replace(&mut self.state, State::Failed)
    }

    /// A misplaced call fails a live exchange but does not undo a completed
    /// one.
    fn out_of_order(&mut self, previous: State) -> SaslError {
        if let State::Done = previous {
            self.state = State::Done;
        }
        SaslError::OutOfOrder
    }
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("token_auth", &self.token_auth)
            .field("max_iterations", &self.max_iterations)
            .field("state", &self.state.name())
            .finish_non_exhaustive()
    }
}

fn invalid(message: &'static str) -> SaslError {
    SaslError::InvalidInput { message }
}

fn malformed(message: &'static str) -> SaslError {
    SaslError::Malformed { message }
}

/// RFC 5802 `printable`: %x21-2B / %x2D-7E.
fn is_printable(s: &str) -> bool {
    s.bytes().all(|b| (0x21..=0x7E).contains(&b) && b != b',')
}

/// RFC 5802 `saslname`: `=` → `=3D`, `,` → `=2C`.
fn push_saslname(out: &mut String, username: &str) {
    for c in username.chars() {
        match c {
            '=' => out.push_str("=3D"),
            ',' => out.push_str("=2C"),
            c => out.push(c),
        }
    }
}

/// Length bound, then UTF-8.
fn message_text(msg: &[u8]) -> Result<&str, SaslError> {
    if msg.len() > ScramClient::MAX_MESSAGE_LEN {
        return Err(SaslError::MessageTooLarge {
            length: msg.len(),
            maximum: ScramClient::MAX_MESSAGE_LEN,
        });
    }
    std::str::from_utf8(msg).map_err(|_| malformed("message is not valid UTF-8"))
}

struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

/// `server-first-message = [reserved-mext ","] nonce "," salt ","
/// iteration-count ["," extensions]`.
fn parse_server_first<'a>(
    text: &'a str,
    client_nonce: &str,
    max_iterations: u32,
) -> Result<ServerFirst<'a>, SaslError> {
    if let Some(error) = text.strip_prefix("e=") {
        let error = error.split(',').next().unwrap_or_default();
        return Err(SaslError::ServerError(error.to_owned()));
    }
    if text.starts_with("m=") {
        return Err(malformed(
            "server-first requires an unsupported mandatory extension (m=)",
        ));
    }
    let mut parts = text.split(',');
    let nonce = parts
        .next()
        .and_then(|p| p.strip_prefix("r="))
        .ok_or(malformed("server-first lacks the r= (nonce) attribute"))?;
    let salt = parts
        .next()
        .and_then(|p| p.strip_prefix("s="))
        .ok_or(malformed("server-first lacks the s= (salt) attribute"))?;
    let iterations = parts
        .next()
        .and_then(|p| p.strip_prefix("i="))
        .ok_or(malformed("server-first lacks the i= (iteration count) attribute"))?;
    for extension in parts {
        match extension.split_once('=') {
            Some((key, _)) if !key.is_empty() => {}
            _ => return Err(malformed("server-first has a malformed extension")),
        }
    }

    if nonce.len() <= client_nonce.len() || !nonce.starts_with(client_nonce) {
        return Err(SaslError::NonceMismatch);
    }
    if !is_printable(nonce) {
        return Err(malformed("server nonce has non-printable characters"));
    }
    let salt = BASE64.decode(salt).map_err(|_| malformed("salt is not valid base64"))?;
    if salt.is_empty() {
        return Err(malformed("salt is empty"));
    }
    let iterations = parse_iterations(iterations, max_iterations)?;
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

fn parse_iterations(text: &str, max_iterations: u32) -> Result<u32, SaslError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("iteration count is not a decimal number"));
    }
    // Every char is an ASCII digit (checked above).
    let value = text
        .chars()
        .filter_map(|c| c.to_digit(10))
        .fold(0u64, |acc, d| acc.saturating_mul(10).saturating_add(u64::from(d)));
    if value < u64::from(ScramClient::MIN_ITERATIONS) {
        return Err(SaslError::IterationCountTooLow {
            iterations: value,
            minimum: ScramClient::MIN_ITERATIONS,
        });
    }
    match u32::try_from(value) {
        Ok(n) if n <= max_iterations => Ok(n),
        _ => Err(SaslError::IterationCountTooHigh {
            iterations: value,
            maximum: max_iterations,
        }),
    }
}

struct Keys {
    client_proof: Vec<u8>,
    server_signature: Vec<u8>,
}

/// The three primitives SCRAM needs from its hash function.
trait ScramHash {
    /// `Hi()`: PBKDF2-HMAC with the hash's output length.
    /// `None` only if the HMAC implementation rejects a key, which it never
    /// does (HMAC takes keys of any length); propagated rather than assumed.
    fn hi(password: &[u8], salt: &[u8], iterations: u32) -> Option<Vec<u8>>;
    fn hmac(key: &[u8], data: &[u8]) -> Option<Vec<u8>>;
    fn h(data: &[u8]) -> Vec<u8>;
}

macro_rules! scram_hash {
    ($digest:ty) => {
        impl ScramHash for $digest {
            fn hi(password: &[u8], salt: &[u8], iterations: u32) -> Option<Vec<u8>> {
                let mut out = vec![0u8; <$digest as Digest>::output_size()];
                pbkdf2::pbkdf2::<Hmac<$digest>>(password, salt, iterations, &mut out).ok()?;
                Some(out)
            }

            fn hmac(key: &[u8], data: &[u8]) -> Option<Vec<u8>> {
                let mut mac = <Hmac<$digest> as Mac>::new_from_slice(key).ok()?;
                mac.update(data);
                Some(mac.finalize().into_bytes().to_vec())
            }

            fn h(data: &[u8]) -> Vec<u8> {
                <$digest as Digest>::digest(data).to_vec()
            }
        }
    };
}

scram_hash!(Sha256);
scram_hash!(Sha512);

/// RFC 5802 section 3:
///
/// ```text
/// SaltedPassword  := Hi(Normalize(password), salt, i)
/// ClientKey       := HMAC(SaltedPassword, "Client Key")
/// StoredKey       := H(ClientKey)
/// ClientSignature := HMAC(StoredKey, AuthMessage)
/// ClientProof     := ClientKey XOR ClientSignature
/// ServerKey       := HMAC(SaltedPassword, "Server Key")
/// ServerSignature := HMAC(ServerKey, AuthMessage)
/// ```
fn derive_keys<D: ScramHash>(password: &[u8], salt: &[u8], iterations: u32, auth_message: &[u8]) -> Option<Keys> {
    let mut salted = D::hi(password, salt, iterations)?;
    let mut client_key = D::hmac(&salted, b"Client Key")?;
    let mut stored_key = D::h(&client_key);
    let client_signature = D::hmac(&stored_key, auth_message)?;
    let client_proof = client_key.iter().zip(&client_signature).map(|(k, s)| k ^ s).collect();
    let mut server_key = D::hmac(&salted, b"Server Key")?;
    let server_signature = D::hmac(&server_key, auth_message)?;
    for buf in [&mut salted, &mut client_key, &mut stored_key, &mut server_key] {
        wipe(buf);
    }
    Some(Keys {
        client_proof,
        server_signature,
    })
}

/// Best-effort overwrite of key material (no `unsafe`, so not guaranteed).
fn wipe(buf: &mut [u8]) {
    buf.fill(0);
    std::hint::black_box(buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // RFC 7677 section 3.
    const RFC_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const RFC_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const RFC_CLIENT_FINAL: &str =
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
    const RFC_SERVER_NONCE: &str = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";

    // Generated independently with Python's hashlib/hmac by
    // wire/testdata/sasl/scram_sha512_vector.py; regenerate with
    // `python3 wire/testdata/sasl/scram_sha512_vector.py` and paste its output.
    // SCRAM-SHA-512: user "k=afka,us=er", password "p\u{e4}ss,w=rd"
    const SHA512_CLIENT_FIRST: &str = "n,,n=k=3Dafka=2Cus=3Der,r=Zm9vYmFyYmF6cXV4MTIzNDU2";
    const SHA512_SERVER_FIRST: &str = "r=Zm9vYmFyYmF6cXV4MTIzNDU2SeRvEr+n0nce/42,s=AQIDBAUGBwgJCgsMDQ4PEA==,i=4096";
    const SHA512_CLIENT_FINAL: &str = "c=biws,r=Zm9vYmFyYmF6cXV4MTIzNDU2SeRvEr+n0nce/42,p=fyUp4DOLvCRur/M6a34y6fZAPATh5EmrwkjM8l2JyNm88RqDFDrNeXL43cUrU/aLubaALzaJCU70ysoZq0ZFSg==";
    const SHA512_SERVER_FINAL: &str =
        "v=ok9E3bq/tCLD5tpwVokN80V1SdWiB4tMxNSgeiFloIfsxgjIwAiCg9GT+D7RsTib+zz+YJqpsybDoQcDmaNK0g==";
    // SCRAM-SHA-256 with tokenauth=true: user "tokenid", password "tokenhmac"
    const TOKEN_CLIENT_FIRST: &str = "n,,n=tokenid,r=dG9rZW5ub25jZQ,tokenauth=true";
    const TOKEN_SERVER_FIRST: &str = "r=dG9rZW5ub25jZQsrv-part,s=a2Fma2Etc2FsdA==,i=8192";
    const TOKEN_CLIENT_FINAL: &str = "c=biws,r=dG9rZW5ub25jZQsrv-part,p=BVyclutpBhgspxQ4CcY7mT08y3QiHUINFcrOl3QPlqk=";
    const TOKEN_SERVER_FINAL: &str = "v=I1LdTqnbxiIDLBUw8vecDXUpbQ507xU7eqyLuIY+LjM=";

    const PASSWORD: &str = "pencil";

    fn rfc_client() -> ScramClient {
        ScramClient::new(SaslMechanism::ScramSha256, "user", &Secret::new(PASSWORD), RFC_NONCE).unwrap()
    }

    /// A client that has sent client-first.
    fn started(mechanism: SaslMechanism) -> ScramClient {
        let mut c = ScramClient::new(mechanism, "user", &Secret::new(PASSWORD), RFC_NONCE)
            .unwrap()
            .with_max_iterations(ScramClient::MIN_ITERATIONS);
        c.client_first().unwrap();
        c
    }

    /// A client that has sent the RFC 7677 client-final (built directly, to
    /// skip PBKDF2 in property tests).
    fn awaiting_final() -> ScramClient {
        let mut c = rfc_client();
        c.state = State::AwaitingServerFinal {
            server_signature: BASE64.decode(&RFC_SERVER_FINAL[2..]).unwrap(),
        };
        c
    }

    fn server_first_with(nonce: &str, salt: &str, iterations: &str) -> String {
        format!("r={nonce},s={salt},i={iterations}")
    }

    fn first_err(server_first: &[u8]) -> SaslError {
        let mut c = started(SaslMechanism::ScramSha256);
        let err = c.handle_server_first(server_first).unwrap_err();
        assert!(!c.is_complete());
        // The failure is terminal.
        assert_eq!(
            c.handle_server_final(RFC_SERVER_FINAL.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert_eq!(c.client_first(), Err(SaslError::OutOfOrder));
        err
    }

    fn assert_malformed(err: SaslError) {
        assert!(matches!(err, SaslError::Malformed { .. }), "{err:?}");
    }

    fn run(client: &mut ScramClient, client_first: &str, server_first: &str, client_final: &str, server_final: &str) {
        assert_eq!(client.client_first().unwrap(), client_first.as_bytes());
        assert!(!client.is_complete());
        let out = client.handle_server_first(server_first.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), client_final);
        assert!(!client.is_complete());
        client.handle_server_final(server_final.as_bytes()).unwrap();
        assert!(client.is_complete());
    }

    #[test]
    fn rfc7677_sha256_vector() {
        let mut c = rfc_client();
        run(
            &mut c,
            RFC_CLIENT_FIRST,
            RFC_SERVER_FIRST,
            RFC_CLIENT_FINAL,
            RFC_SERVER_FINAL,
        );
        assert_eq!(c.mechanism(), SaslMechanism::ScramSha256);
    }

    #[test]
    fn python_sha512_vector_with_escaped_username() {
        let mut c = ScramClient::new(
            SaslMechanism::ScramSha512,
            "k=afka,us=er",
            &Secret::new("p\u{e4}ss,w=rd"),
            "Zm9vYmFyYmF6cXV4MTIzNDU2",
        )
        .unwrap();
        run(
            &mut c,
            SHA512_CLIENT_FIRST,
            SHA512_SERVER_FIRST,
            SHA512_CLIENT_FINAL,
            SHA512_SERVER_FINAL,
        );
    }

    #[test]
    fn python_sha256_tokenauth_vector() {
        let mut c = ScramClient::new(
            SaslMechanism::ScramSha256,
            "tokenid",
            &Secret::new("tokenhmac"),
            "dG9rZW5ub25jZQ",
        )
        .unwrap()
        .with_token_auth(true);
        run(
            &mut c,
            TOKEN_CLIENT_FIRST,
            TOKEN_SERVER_FIRST,
            TOKEN_CLIENT_FINAL,
            TOKEN_SERVER_FINAL,
        );
    }

    #[test]
    fn mechanisms_are_not_interchangeable() {
        // The SHA-256 exchange run with SHA-512 must not produce the RFC proof.
        let mut c = ScramClient::new(SaslMechanism::ScramSha512, "user", &Secret::new(PASSWORD), RFC_NONCE).unwrap();
        c.client_first().unwrap();
        let out = c.handle_server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
        assert_ne!(out, RFC_CLIENT_FINAL.as_bytes());
        assert_eq!(
            c.handle_server_final(RFC_SERVER_FINAL.as_bytes()),
            Err(SaslError::ServerSignatureMismatch)
        );
    }

    #[test]
    fn username_escaping() {
        let mut c = ScramClient::new(SaslMechanism::ScramSha256, "a=b,c", &Secret::new("x"), "nonce").unwrap();
        assert_eq!(c.client_first().unwrap(), b"n,,n=a=3Db=2Cc,r=nonce");
        let mut c = ScramClient::new(SaslMechanism::ScramSha256, "==,,", &Secret::new("x"), "nonce").unwrap();
        assert_eq!(c.client_first().unwrap(), b"n,,n==3D=3D=2C=2C,r=nonce");
    }

    #[test]
    fn nonce_helper() {
        assert_eq!(nonce_from_random_bytes(&[0xFB, 0xEF, 0xFF, 0]), "++//AA==");
        let nonce = nonce_from_random_bytes(&[7u8; 24]);
        assert!(ScramClient::new(SaslMechanism::ScramSha512, "u", &Secret::new("p"), nonce).is_ok());
        assert!(ScramClient::new(
            SaslMechanism::ScramSha512,
            "u",
            &Secret::new("p"),
            nonce_from_random_bytes(&[])
        )
        .is_err());
    }

    #[test]
    fn constructor_rejects_bad_input() {
        let pw = Secret::new(PASSWORD);
        for (mechanism, user, nonce) in [
            (SaslMechanism::Plain, "user", "nonce"),
            (SaslMechanism::ScramSha256, "", "nonce"),
            (SaslMechanism::ScramSha256, "us\0er", "nonce"),
            (SaslMechanism::ScramSha256, "user", ""),
            (SaslMechanism::ScramSha256, "user", "non,ce"),
            (SaslMechanism::ScramSha256, "user", "non ce"),
            (SaslMechanism::ScramSha256, "user", "nonce\n"),
            (SaslMechanism::ScramSha512, "user", "n\u{f6}nce"),
        ] {
            let err = ScramClient::new(mechanism, user, &pw, nonce).unwrap_err();
            assert!(matches!(err, SaslError::InvalidInput { .. }), "{err:?}");
        }
    }

    #[test]
    fn nonce_must_extend_client_nonce() {
        for nonce in [
            // Different prefix.
            "XOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            // Equal to the client nonce, no server part.
            RFC_NONCE,
            // Shorter.
            "rOprNGfw",
            // Client nonce in the middle, not at the start.
            "xrOprNGfwEbeRWgbNEkqO",
            "",
        ] {
            let msg = server_first_with(nonce, RFC_SALT, "4096");
            assert_eq!(first_err(msg.as_bytes()), SaslError::NonceMismatch, "{nonce}");
        }
        let msg = server_first_with(&format!("{RFC_NONCE}ab\u{e9}"), RFC_SALT, "4096");
        assert_malformed(first_err(msg.as_bytes()));
    }

    #[test]
    fn iteration_count_bounds() {
        let check = |i: &str| first_err(server_first_with(RFC_SERVER_NONCE, RFC_SALT, i).as_bytes());
        assert_eq!(
            check("4095"),
            SaslError::IterationCountTooLow {
                iterations: 4095,
                minimum: 4096
            }
        );
        assert_eq!(
            check("0"),
            SaslError::IterationCountTooLow {
                iterations: 0,
                minimum: 4096
            }
        );
        // `started` caps at 4096.
        assert_eq!(
            check("4097"),
            SaslError::IterationCountTooHigh {
                iterations: 4097,
                maximum: 4096
            }
        );
        assert_eq!(
            check("99999999999999999999999999"),
            SaslError::IterationCountTooHigh {
                iterations: u64::MAX,
                maximum: 4096
            }
        );
        for bad in [
            "-1",
            "-4096",
            "+4096",
            "abc",
            "",
            "4096 ",
            " 4096",
            "4e3",
            "0x1000",
            "\u{664}096",
        ] {
            assert_malformed(check(bad));
        }

        // The default cap.
        let mut c = rfc_client();
        c.client_first().unwrap();
        let msg = server_first_with(RFC_SERVER_NONCE, RFC_SALT, "1000001");
        assert_eq!(
            c.handle_server_first(msg.as_bytes()),
            Err(SaslError::IterationCountTooHigh {
                iterations: 1_000_001,
                maximum: 1_000_000
            })
        );
    }

    #[test]
    fn server_first_malformed() {
        let cases: &[&[u8]] = &[
            b"",
            b"r=",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ==",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ==,",
            // Wrong order.
            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,r=rOprNGfwEbeRWgbNEkqO%hvY,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,i=4096,s=W22ZaJ0SNY7soEsUEjb6gQ==",
            // Bad base64 salt, empty salt.
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=not*base64,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=,i=4096",
            // Mandatory extension.
            b"m=ext,r=rOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            // Malformed trailing extensions.
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,junk",
            b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,=x",
            // Not UTF-8.
            b"r=rOprNGfwEbeRWgbNEkqO\xff\xfe,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            b"\xc3\x28",
            // Garbage.
            b"\0\0\0\0",
            b",,,,",
            b"hello world",
        ];
        for case in cases {
            let err = first_err(case);
            assert!(
                matches!(err, SaslError::Malformed { .. } | SaslError::NonceMismatch),
                "{:?} -> {err:?}",
                String::from_utf8_lossy(case)
            );
        }
        assert_malformed(first_err(b"r=rOprNGfwEbeRWgbNEkqO%hvY,s=W22ZaJ0SNY7soEsUEjb6gQ=="));
    }

    #[test]
    fn unknown_server_extensions_are_ignored() {
        let mut c = started(SaslMechanism::ScramSha256);
        let msg = format!("{RFC_SERVER_FIRST},x=foo,kafka=1");
        let out = c.handle_server_first(msg.as_bytes()).unwrap();
        // The extension is part of AuthMessage, so the proof differs.
        assert!(out.starts_with(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p="));
        assert_ne!(out, RFC_CLIENT_FINAL.as_bytes());
    }

    #[test]
    fn message_size_bound() {
        let huge = vec![b'r'; ScramClient::MAX_MESSAGE_LEN + 1];
        assert_eq!(
            first_err(&huge),
            SaslError::MessageTooLarge {
                length: huge.len(),
                maximum: 64 * 1024
            }
        );
        let mut c = awaiting_final();
        assert!(matches!(
            c.handle_server_final(&huge),
            Err(SaslError::MessageTooLarge { .. })
        ));
        // At the bound the message is parsed (and here rejected as garbage).
        let at_bound = vec![b'r'; ScramClient::MAX_MESSAGE_LEN];
        assert_malformed(first_err(&at_bound));
    }

    #[test]
    fn server_error_in_server_first() {
        assert_eq!(
            first_err(b"e=unknown-user"),
            SaslError::ServerError("unknown-user".into())
        );
        assert_eq!(
            first_err(b"e=other-error,x=1"),
            SaslError::ServerError("other-error".into())
        );
    }

    #[test]
    fn server_final_error_and_tampering() {
        let mut c = awaiting_final();
        let err = c.handle_server_final(b"e=invalid-proof").unwrap_err();
        assert_eq!(err, SaslError::ServerError("invalid-proof".into()));
        assert!(err.to_string().contains("invalid-proof"));
        assert!(!c.is_complete());
        assert_eq!(
            c.handle_server_final(RFC_SERVER_FINAL.as_bytes()),
            Err(SaslError::OutOfOrder)
        );

        // Flip one character of the real signature.
        let mut tampered = RFC_SERVER_FINAL.as_bytes().to_vec();
        tampered[5] = if tampered[5] == b'A' { b'B' } else { b'A' };
        // Wrong length, valid base64.
        let short = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95A==";
        let long = format!("{RFC_SERVER_FINAL}AAAA");
        for msg in [&tampered[..], short.as_bytes(), b"v=", long.as_bytes()] {
            let mut c = awaiting_final();
            let err = c.handle_server_final(msg).unwrap_err();
            assert!(
                matches!(err, SaslError::ServerSignatureMismatch | SaslError::Malformed { .. }),
                "{err:?}"
            );
            assert!(!c.is_complete());
        }
        let mut c = awaiting_final();
        assert_eq!(
            c.handle_server_final(&tampered),
            Err(SaslError::ServerSignatureMismatch)
        );

        for msg in [
            &b""[..],
            b"x=1",
            b"v=***",
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn",
            b"\xff",
            b"V=abc",
        ] {
            let mut c = awaiting_final();
            assert_malformed(c.handle_server_final(msg).unwrap_err());
            assert!(!c.is_complete());
        }

        // Extensions after a good verifier are ignored.
        let mut c = awaiting_final();
        c.handle_server_final(format!("{RFC_SERVER_FINAL},x=y").as_bytes())
            .unwrap();
        assert!(c.is_complete());
    }

    #[test]
    fn out_of_order_calls() {
        // server-first before client-first.
        let mut c = rfc_client();
        assert_eq!(
            c.handle_server_first(RFC_SERVER_FIRST.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert_eq!(c.client_first(), Err(SaslError::OutOfOrder));

        // server-final before server-first.
        let mut c = rfc_client();
        c.client_first().unwrap();
        assert_eq!(
            c.handle_server_final(RFC_SERVER_FINAL.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert_eq!(
            c.handle_server_first(RFC_SERVER_FIRST.as_bytes()),
            Err(SaslError::OutOfOrder)
        );

        // client-first twice.
        let mut c = rfc_client();
        c.client_first().unwrap();
        assert_eq!(c.client_first(), Err(SaslError::OutOfOrder));
        assert_eq!(
            c.handle_server_first(RFC_SERVER_FIRST.as_bytes()),
            Err(SaslError::OutOfOrder)
        );

        // server-first twice.
        let mut c = rfc_client();
        c.client_first().unwrap();
        c.handle_server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(
            c.handle_server_first(RFC_SERVER_FIRST.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert_eq!(
            c.handle_server_final(RFC_SERVER_FINAL.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert!(!c.is_complete());

        // After success every call is out of order, and success stands.
        let mut c = rfc_client();
        run(
            &mut c,
            RFC_CLIENT_FIRST,
            RFC_SERVER_FIRST,
            RFC_CLIENT_FINAL,
            RFC_SERVER_FINAL,
        );
        assert_eq!(c.client_first(), Err(SaslError::OutOfOrder));
        assert_eq!(
            c.handle_server_first(RFC_SERVER_FIRST.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert_eq!(
            c.handle_server_final(RFC_SERVER_FINAL.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert!(c.is_complete());
    }

    #[test]
    fn after_failure_everything_is_out_of_order() {
        let mut c = rfc_client();
        c.client_first().unwrap();
        let bad = server_first_with("someone-elses-nonce", RFC_SALT, "4096");
        assert_eq!(c.handle_server_first(bad.as_bytes()), Err(SaslError::NonceMismatch));
        // Even the correct message is refused now.
        assert_eq!(
            c.handle_server_first(RFC_SERVER_FIRST.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert_eq!(
            c.handle_server_final(RFC_SERVER_FINAL.as_bytes()),
            Err(SaslError::OutOfOrder)
        );
        assert_eq!(c.client_first(), Err(SaslError::OutOfOrder));
        assert!(!c.is_complete());
    }

    #[test]
    fn debug_never_shows_password() {
        let secret = "correct-horse-battery-staple";
        let mut c = ScramClient::new(SaslMechanism::ScramSha256, "alice", &Secret::new(secret), "n0nce").unwrap();
        let mut outputs = vec![format!("{c:?}"), format!("{c:#?}")];
        c.client_first().unwrap();
        outputs.push(format!("{c:?}"));
        let err = c.handle_server_first(b"r=n0nceX,s=c2FsdA==,i=1").unwrap_err();
        outputs.push(format!("{c:?} {err:?} {err}"));
        for out in &outputs {
            assert!(!out.contains(secret), "{out}");
            assert!(!out.contains("horse"), "{out}");
        }
        assert!(
            outputs[0].contains("alice") && outputs[0].contains("Initial"),
            "{}",
            outputs[0]
        );
    }

    #[test]
    fn fuzz_harness_smoke() {
        use crate::sasl::fuzzing::{scram_server_messages, CLIENT_NONCE};
        scram_server_messages(b"");
        scram_server_messages(b"\xff");
        scram_server_messages(b"\xff\xff\xff");
        let good_first = format!("r={CLIENT_NONCE}srv,s=c2FsdA==,i=4096");
        scram_server_messages(good_first.as_bytes());
        let mut both = good_first.into_bytes();
        both.push(0xFF);
        both.extend_from_slice(b"v=AAAA");
        scram_server_messages(&both);
    }

    fn unescape(saslname: &str) -> Option<String> {
        let mut out = String::new();
        let mut rest = saslname;
        while let Some(i) = rest.find('=') {
            out.push_str(&rest[..i]);
            let code = rest.get(i + 1..i + 3)?;
            out.push(match code {
                "3D" => '=',
                "2C" => ',',
                _ => return None,
            });
            rest = &rest[i + 3..];
        }
        out.push_str(rest);
        Some(out)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_server_first_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            for mechanism in [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512] {
                let mut c = started(mechanism);
                if c.handle_server_first(&data).is_err() {
                    prop_assert_eq!(c.handle_server_final(b"v=AAAA"), Err(SaslError::OutOfOrder));
                }
                prop_assert!(!c.is_complete());
            }
        }

        #[test]
        fn arbitrary_server_final_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut c = awaiting_final();
            let result = c.handle_server_final(&data);
            // Only the true signature (optionally followed by extensions) passes.
            if result.is_ok() {
                prop_assert!(data.starts_with(RFC_SERVER_FINAL.as_bytes()));
            }
            prop_assert_eq!(c.is_complete(), result.is_ok());
        }

        #[test]
        fn harness_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            crate::sasl::fuzzing::scram_server_messages(&data);
        }

        #[test]
        fn username_escaping_round_trips(user in "[^\\x00]{1,24}") {
            let mut name = String::new();
            push_saslname(&mut name, &user);
            prop_assert!(!name.contains(','));
            prop_assert_eq!(unescape(&name), Some(user));
        }
    }

    proptest! {
        // Structured inputs reach PBKDF2, so fewer cases.
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        #[test]
        fn near_valid_server_first_never_panics(
            suffix in "[!-~]{0,12}",
            salt in "[A-Za-z0-9+/=*]{0,12}",
            iterations in "[0-9-]{0,6}",
            tail in "(,[a-z]{0,3}=?[!-+\\--~]{0,4}){0,2}",
        ) {
            let msg = format!("r={RFC_NONCE}{suffix},s={salt},i={iterations}{tail}");
            let mut c = started(SaslMechanism::ScramSha256);
            if let Ok(out) = c.handle_server_first(msg.as_bytes()) {
                let out = String::from_utf8(out).unwrap();
                let expected_prefix = format!("c=biws,r={RFC_NONCE}{suffix},p=");
                prop_assert!(out.starts_with(&expected_prefix));
            }
        }
    }
}
