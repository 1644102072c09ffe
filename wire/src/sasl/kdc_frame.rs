//! Kerberos over TCP framing ([RFC 4120] section 7.2.2), transport-free:
//! each KDC message is preceded by its length as a 4-byte big-endian
//! integer whose high bit is reserved (set only by the unused extension
//! mechanism, refused here). Replies are bounded by [`MAX_KDC_REPLY`] before
//! any buffer is allocated.
//!
//! [RFC 4120]: https://www.rfc-editor.org/rfc/rfc4120#section-7.2.2

use super::SaslError;

/// The largest KDC reply accepted (tickets with PACs are a few KiB).
pub const MAX_KDC_REPLY: usize = 64 * 1024;

/// The largest request this client frames.
pub const MAX_KDC_REQUEST: usize = 64 * 1024;

/// `message` with its 4-byte length prefix.
pub fn frame_kdc_request(message: &[u8]) -> Result<Vec<u8>, SaslError> {
    if message.len() > MAX_KDC_REQUEST {
        return Err(SaslError::MessageTooLarge {
            length: message.len(),
            maximum: MAX_KDC_REQUEST,
        });
    }
    let mut out = Vec::with_capacity(message.len().saturating_add(4));
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Ok(out)
}

/// The length announced by a reply's 4-byte prefix, checked: the reserved
/// high bit must be clear, the length non-zero and at most [`MAX_KDC_REPLY`].
pub fn kdc_reply_length(prefix: [u8; 4]) -> Result<usize, SaslError> {
    let raw = u32::from_be_bytes(prefix);
    if raw & 0x8000_0000 != 0 {
        return Err(SaslError::Malformed {
            message: "KDC reply length has the reserved high bit set",
        });
    }
    let length = raw as usize;
    if length == 0 {
        return Err(SaslError::Malformed {
            message: "KDC reply is empty",
        });
    }
    if length > MAX_KDC_REPLY {
        return Err(SaslError::MessageTooLarge {
            length,
            maximum: MAX_KDC_REPLY,
        });
    }
    Ok(length)
}

/// Splits a complete buffered reply (prefix + body) into its body; `None`
/// when more bytes are needed. Errors as [`kdc_reply_length`], and when the
/// buffer holds bytes beyond the announced reply.
pub fn kdc_reply_body(buffer: &[u8]) -> Result<Option<&[u8]>, SaslError> {
    let Some((prefix, body)) = buffer.split_first_chunk::<4>() else {
        return Ok(None);
    };
    let length = kdc_reply_length(*prefix)?;
    match body.len().cmp(&length) {
        std::cmp::Ordering::Less => Ok(None),
        std::cmp::Ordering::Equal => Ok(Some(body)),
        std::cmp::Ordering::Greater => Err(SaslError::Malformed {
            message: "bytes after the KDC reply",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let framed = frame_kdc_request(b"as-req").unwrap();
        assert_eq!(framed, b"\x00\x00\x00\x06as-req");
        assert_eq!(kdc_reply_body(&framed), Ok(Some(&b"as-req"[..])));
        assert_eq!(kdc_reply_body(&framed[..5]), Ok(None));
        assert_eq!(kdc_reply_body(&framed[..3]), Ok(None));
        let mut extra = framed.clone();
        extra.push(0);
        assert!(kdc_reply_body(&extra).is_err());
        assert!(kdc_reply_length([0x80, 0, 0, 1]).is_err());
        assert!(kdc_reply_length([0, 0, 0, 0]).is_err());
        assert!(matches!(
            kdc_reply_length([0x7f, 0xff, 0xff, 0xff]),
            Err(SaslError::MessageTooLarge { .. })
        ));
        assert_eq!(kdc_reply_length([0, 1, 0, 0]), Ok(MAX_KDC_REPLY));
        assert!(frame_kdc_request(&vec![0; MAX_KDC_REQUEST + 1]).is_err());
    }
}
