//! SASL authentication on a fresh connection: `SaslHandshake` v1 names the
//! mechanism, then `SaslAuthenticate` requests carry the tokens ([KIP-43],
//! [KIP-152]). The token logic is the wire crate's transport-free
//! [`ScramClient`] and [`plain_initial_response`]; this module only moves the
//! tokens and draws the SCRAM nonce (24 bytes from the OS via `getrandom`).
//!
//! A failure is an [`Error::Authentication`] naming the mechanism and carrying
//! the broker's message. There is no fallback to another mechanism, and the
//! password is a [`Secret`](clink_kafka_wire::secret::Secret) that never
//! reaches a log line or an error.
//!
//! [KIP-43]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-43%3A+Kafka+SASL+enhancements
//! [KIP-152]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-152+-+Improve+diagnostics+for+SASL+authentication+failures

use bytes::Bytes;
use clink_kafka_wire::kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::sasl::oauthbearer::{self, ServerReply};
use clink_kafka_wire::sasl::{
    nonce_from_random_bytes, plain_initial_response, GssapiClient, SaslError, SaslMechanism, ScramClient,
};
use clink_kafka_wire::KafkaCode;

use std::time::{Duration, SystemTime};

use super::connection::{BrokerConnection, Route};
use super::SaslConfig;
use crate::error::{Error, Result};

/// Bytes of OS randomness in a SCRAM client nonce.
const NONCE_BYTES: usize = 24;

/// Runs the whole SASL exchange for `sasl.mechanism` on `conn` through
/// `route` (the control queue for a re-authentication) and returns the
/// session lifetime the broker gave (KIP-368; `None` when it sets none).
pub(crate) async fn authenticate(conn: &BrokerConnection, sasl: &SaslConfig, route: Route) -> Result<Option<Duration>> {
    let mechanism = sasl.mechanism;
    let fail = |message: String| Error::Authentication {
        broker: conn.broker().clone(),
        mechanism: mechanism.name(),
        message,
    };
    let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name()));
    let version = conn.version_for::<SaslHandshakeRequest>(None)?;
    let response = conn.request_routed(version, &handshake, route).await?;
    match KafkaCode(response.error_code) {
        KafkaCode::NONE => {}
        KafkaCode::UNSUPPORTED_SASL_MECHANISM => {
            let offered: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(fail(format!(
                "the broker does not enable this mechanism on this listener; it offers [{}]",
                offered.join(", ")
            )));
        }
        code => return Err(fail(format!("SaslHandshake answered {code}"))),
    }
    let version = conn.version_for::<SaslAuthenticateRequest>(None)?;
    let step = |token: Vec<u8>| async move {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        let response = conn.request_routed(version, &request, route).await?;
        if response.error_code != 0 {
            let code = KafkaCode(response.error_code);
            let message = match response.error_message {
                Some(m) if !m.is_empty() => format!("{m} ({code})"),
                _ => code.to_string(),
            };
            return Err(fail(message));
        }
        let lifetime = u64::try_from(response.session_lifetime_ms).ok().filter(|ms| *ms > 0);
        Ok((response.auth_bytes, lifetime.map(Duration::from_millis)))
    };
    let lifetime = match mechanism {
        SaslMechanism::Plain => {
            let token = plain_initial_response("", &sasl.username, &sasl.password).map_err(|e| fail(e.to_string()))?;
            step(token).await?.1
        }
        m if m.is_scram() => {
            let mut random = [0u8; NONCE_BYTES];
            getrandom::fill(&mut random).map_err(|e| fail(format!("drawing the SCRAM nonce: {e}")))?;
            let mut client = ScramClient::new(m, &sasl.username, &sasl.password, nonce_from_random_bytes(&random))
                .map_err(|e| fail(e.to_string()))?;
            let first = client.client_first().map_err(|e| fail(e.to_string()))?;
            let (server_first, _) = step(first).await?;
            let last = client
                .handle_server_first(&server_first)
                .map_err(|e| fail(e.to_string()))?;
            let (server_final, lifetime) = step(last).await?;
            client
                .handle_server_final(&server_final)
                .map_err(|e| fail(e.to_string()))?;
            lifetime
        }
        SaslMechanism::OAuthBearer => {
            let Some(oauth) = &sasl.oauthbearer else {
                return Err(fail("no token source configured (sasl.oauthbearer.method)".into()));
            };
            let token = oauth
                .provider
                .token()
                .await
                .map_err(|e| fail(format!("no token: {e}")))?;
            let first =
                oauthbearer::initial_response(&token.token, &oauth.extensions).map_err(|e| fail(e.to_string()))?;
            let (reply, lifetime) = step(first).await?;
            match oauthbearer::handle_server_reply(&reply) {
                ServerReply::Success => {}
                ServerReply::Failure(document) => {
                    // RFC 7628 §3.2.3: acknowledge; the broker then fails
                    // the exchange with its own message.
                    let detail = match document {
                        Ok(d) => d.to_string(),
                        Err(e) => e.to_string(),
                    };
                    let expired = token.expires_at <= SystemTime::now();
                    let hint = if expired { " (the token had expired)" } else { "" };
                    return Err(match step(oauthbearer::FAILURE_ACK.to_vec()).await {
                        Err(Error::Authentication { message, .. }) => {
                            fail(format!("token refused: {detail}{hint}; broker: {message}"))
                        }
                        _ => fail(format!("token refused: {detail}{hint}")),
                    });
                }
            }
            tracing::debug!(broker = %conn.broker(), principal = ?token.principal, ?lifetime,
                "OAUTHBEARER authenticated");
            lifetime
        }
        SaslMechanism::Gssapi => {
            let Some(krb) = &sasl.kerberos else {
                return Err(fail("no Kerberos identity configured (sasl.kerberos.keytab)".into()));
            };
            let host = super::kerberos::broker_host(&conn.broker().addr);
            let context = super::kerberos::initiate(krb, host)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let mut client = GssapiClient::new(context, "").map_err(|e| fail(e.to_string()))?;
            let explain = |client: &GssapiClient<super::kerberos::KerberosContext>, e: SaslError| match &client
                .context()
                .last_error
            {
                Some(detail) => detail.to_string(),
                None => e.to_string(),
            };
            let first = client.initial_response().map_err(|e| fail(explain(&client, e)))?;
            let (mut reply, mut lifetime) = step(first).await?;
            // AP-REP, then the security-layer offer: two rounds; bounded.
            let mut rounds = 0;
            while !client.is_complete() {
                rounds += 1;
                if rounds > 4 {
                    return Err(fail("the GSSAPI exchange did not finish in 4 rounds".into()));
                }
                let out = client.handle_server(&reply).map_err(|e| fail(explain(&client, e)))?;
                (reply, lifetime) = step(out).await?;
            }
            tracing::debug!(broker = %conn.broker(), principal = %krb.principal, ?lifetime,
                "GSSAPI authenticated");
            lifetime
        }
        other => return Err(fail(format!("mechanism {other} is not implemented by this client"))),
    };
    tracing::debug!(broker = %conn.broker(), mechanism = mechanism.name(), user = %sasl.username,
        ?lifetime, "authenticated");
    Ok(lifetime)
}
