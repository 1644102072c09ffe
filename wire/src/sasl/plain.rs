//! SASL/PLAIN ([RFC 4616](https://www.rfc-editor.org/rfc/rfc4616)).
//!
//! Sends the password in clear: use it only over TLS.

use super::SaslError;
use crate::secret::Secret;

/// The PLAIN initial response `authzid NUL username NUL password`.
///
/// `authzid` is usually empty (Kafka accepts only an empty authzid or one
/// equal to `username`). Fails with [`SaslError::InvalidInput`] if any field
/// contains a NUL byte, or if `username` or `password` is empty (RFC 4616
/// requires both to be non-empty).
pub fn plain_initial_response(authzid: &str, username: &str, password: &Secret) -> Result<Vec<u8>, SaslError> {
    let password = password.expose();
    if authzid.contains('\0') {
        return Err(invalid("PLAIN authorization id contains a NUL byte"));
    }
    if username.contains('\0') {
        return Err(invalid("PLAIN user name contains a NUL byte"));
    }
    if password.contains('\0') {
        return Err(invalid("PLAIN password contains a NUL byte"));
    }
    if username.is_empty() {
        return Err(invalid("PLAIN user name is empty"));
    }
    if password.is_empty() {
        return Err(invalid("PLAIN password is empty"));
    }
    // A capacity hint only: none (0) if the sum would overflow.
    let capacity = [authzid.len(), username.len(), password.len()]
        .into_iter()
        .try_fold(2usize, usize::checked_add)
        .unwrap_or(0);
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(authzid.as_bytes());
    out.push(0);
    out.extend_from_slice(username.as_bytes());
    out.push(0);
    out.extend_from_slice(password.as_bytes());
    Ok(out)
}

fn invalid(message: &'static str) -> SaslError {
    SaslError::InvalidInput { message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_response_bytes() {
        let pw = Secret::new("pencil");
        assert_eq!(
            plain_initial_response("", "user", &pw).unwrap(),
            b"\0user\0pencil".to_vec()
        );
        assert_eq!(
            plain_initial_response("admin", "user", &pw).unwrap(),
            b"admin\0user\0pencil".to_vec()
        );
        // UTF-8 passes through unchanged.
        assert_eq!(
            plain_initial_response("", "j\u{f6}rg", &Secret::new("p\u{e4}ss")).unwrap(),
            "\0j\u{f6}rg\0p\u{e4}ss".as_bytes().to_vec()
        );
    }

    #[test]
    fn rejects_nul_and_empty() {
        let pw = Secret::new("pencil");
        let bad_pw = Secret::new("pen\0cil-secret");
        for (authzid, user, password) in [
            ("a\0", "user", &pw),
            ("", "us\0er", &pw),
            ("", "user", &bad_pw),
            ("", "", &pw),
            ("", "user", &Secret::new("")),
        ] {
            let err = plain_initial_response(authzid, user, password).unwrap_err();
            assert!(matches!(err, SaslError::InvalidInput { .. }), "{err:?}");
            let text = format!("{err} {err:?}");
            assert!(!text.contains("cil-secret"), "{text}");
        }
    }
}
