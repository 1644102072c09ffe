//! RFC 4121 Wrap tokens without confidentiality (the only kind the RFC 4752
//! security-layer negotiation needs), transport- and crypto-free: the
//! checksum (HMAC-SHA1-96 under the derived key for the usage) is supplied
//! by the caller.
//!
//! Token: `05 04`, flags, `FF`, EC (checksum length), RRC (rotation), the
//! 64-bit sequence number, then the data and the checksum, rotated right by
//! RRC. The checksum covers the data followed by the 16-byte header with EC
//! and RRC set to zero, as MIT krb5 and Java compute it.
//!
//! [RFC 4121]: https://www.rfc-editor.org/rfc/rfc4121#section-4.2.6.2

use subtle::ConstantTimeEq;

use super::SaslError;

/// Key usage of tokens the acceptor (broker) sends: KG-USAGE-ACCEPTOR-SEAL.
pub const USAGE_ACCEPTOR_SEAL: i32 = 22;
/// Key usage of tokens the initiator (client) sends: KG-USAGE-INITIATOR-SEAL.
pub const USAGE_INITIATOR_SEAL: i32 = 24;

const FLAG_SENT_BY_ACCEPTOR: u8 = 0x01;
const FLAG_SEALED: u8 = 0x02;
const FLAG_ACCEPTOR_SUBKEY: u8 = 0x04;
const HEADER: usize = 16;
/// The largest checksum accepted (HMAC-SHA1-96 is 12 bytes; SHA-384 based 24).
const MAX_CHECKSUM: usize = 64;

fn header(flags: u8, ec: u16, rrc: u16, seq: u64) -> [u8; HEADER] {
    let [e0, e1] = ec.to_be_bytes();
    let [r0, r1] = rrc.to_be_bytes();
    let [s0, s1, s2, s3, s4, s5, s6, s7] = seq.to_be_bytes();
    [0x05, 0x04, flags, 0xFF, e0, e1, r0, r1, s0, s1, s2, s3, s4, s5, s6, s7]
}

/// Wraps `data` as the initiator: flags 0 (or the acceptor-subkey flag when
/// `acceptor_subkey`), RRC 0, `checksum(usage, to_be_signed)`.
pub fn wrap_initiator(
    data: &[u8],
    seq: u64,
    acceptor_subkey: bool,
    checksum: impl FnOnce(i32, &[u8]) -> Result<Vec<u8>, SaslError>,
) -> Result<Vec<u8>, SaslError> {
    let flags = if acceptor_subkey { FLAG_ACCEPTOR_SUBKEY } else { 0 };
    let mut signed = Vec::with_capacity(data.len().saturating_add(HEADER));
    signed.extend_from_slice(data);
    signed.extend_from_slice(&header(flags, 0, 0, seq));
    let sum = checksum(USAGE_INITIATOR_SEAL, &signed)?;
    let ec = u16::try_from(sum.len()).map_err(|_| SaslError::InvalidInput {
        message: "Kerberos checksum longer than 65535 bytes",
    })?;
    let mut out = Vec::with_capacity(signed.len().saturating_add(sum.len()));
    out.extend_from_slice(&header(flags, ec, 0, seq));
    out.extend_from_slice(data);
    out.extend_from_slice(&sum);
    Ok(out)
}

/// Unwraps an acceptor's token: checks the token id, the sent-by-acceptor
/// flag, that it is not sealed (encrypted), the filler and the checksum
/// (constant-time); returns the data and the sequence number.
pub fn unwrap_acceptor(
    token: &[u8],
    checksum: impl FnOnce(i32, &[u8]) -> Result<Vec<u8>, SaslError>,
) -> Result<(Vec<u8>, u64), SaslError> {
    let malformed = |message| SaslError::Malformed { message };
    let Some((h, body)) = token.split_first_chunk::<HEADER>() else {
        return Err(malformed("Kerberos wrap token shorter than its header"));
    };
    let [t0, t1, flags, filler, e0, e1, r0, r1, s0, s1, s2, s3, s4, s5, s6, s7] = *h;
    if [t0, t1] != [0x05, 0x04] {
        return Err(malformed("not a Kerberos (RFC 4121) wrap token"));
    }
    if filler != 0xFF {
        return Err(malformed("Kerberos wrap token filler is not 0xFF"));
    }
    if flags & FLAG_SENT_BY_ACCEPTOR == 0 {
        return Err(malformed("Kerberos wrap token not sent by the acceptor (reflected?)"));
    }
    if flags & FLAG_SEALED != 0 {
        return Err(malformed("Kerberos wrap token is encrypted; expected integrity only"));
    }
    let ec = usize::from(u16::from_be_bytes([e0, e1]));
    let rrc = usize::from(u16::from_be_bytes([r0, r1]));
    if ec > MAX_CHECKSUM || ec > body.len() {
        return Err(malformed("Kerberos wrap token checksum length does not fit"));
    }
    let mut body = body.to_vec();
    if let Some(shift) = rrc.checked_rem(body.len()) {
        body.rotate_left(shift);
    }
    let split = body.len().saturating_sub(ec);
    let (data, sum) = body.split_at(split);
    let mut signed = Vec::with_capacity(data.len().saturating_add(HEADER));
    signed.extend_from_slice(data);
    let seq = u64::from_be_bytes([s0, s1, s2, s3, s4, s5, s6, s7]);
    signed.extend_from_slice(&header(flags, 0, 0, seq));
    let expected = checksum(USAGE_ACCEPTOR_SEAL, &signed)?;
    if expected.len() != sum.len() || !bool::from(expected.as_slice().ct_eq(sum)) {
        return Err(SaslError::ServerSignatureMismatch);
    }
    Ok((data.to_vec(), seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in checksum: usage byte then a byte sum, 12 bytes.
    fn fake(usage: i32, data: &[u8]) -> Result<Vec<u8>, SaslError> {
        let s = data.iter().fold(0u8, |a, b| a.wrapping_add(*b));
        Ok(vec![usage as u8, s, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9])
    }

    fn acceptor_token(data: &[u8], seq: u64, rrc: u16) -> Vec<u8> {
        let mut signed = data.to_vec();
        signed.extend_from_slice(&header(1, 0, 0, seq));
        let sum = fake(USAGE_ACCEPTOR_SEAL, &signed).unwrap();
        let mut body = data.to_vec();
        body.extend_from_slice(&sum);
        let len = body.len();
        body.rotate_right(usize::from(rrc) % len);
        let mut t = header(1, 12, rrc, seq).to_vec();
        t.extend_from_slice(&body);
        t
    }

    #[test]
    fn wrap_layout() {
        let t = wrap_initiator(&[1, 0, 0, 0], 7, false, fake).unwrap();
        assert_eq!(&t[..16], &[5, 4, 0, 0xFF, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(&t[16..20], &[1, 0, 0, 0]);
        assert_eq!(t[20], USAGE_INITIATOR_SEAL as u8);
        assert_eq!(t.len(), 32);
    }

    #[test]
    fn unwrap_with_and_without_rotation() {
        for rrc in [0u16, 5, 12, 28] {
            let t = acceptor_token(&[1, 1, 0, 0], 42, rrc);
            assert_eq!(unwrap_acceptor(&t, fake), Ok((vec![1, 1, 0, 0], 42)), "rrc {rrc}");
        }
    }

    #[test]
    fn refusals() {
        let good = acceptor_token(&[1, 1, 0, 0], 42, 0);
        let mut bad_sum = good.clone();
        *bad_sum.last_mut().unwrap() ^= 1;
        assert_eq!(unwrap_acceptor(&bad_sum, fake), Err(SaslError::ServerSignatureMismatch));
        let mut bad_data = good.clone();
        bad_data[16] = 7;
        assert_eq!(
            unwrap_acceptor(&bad_data, fake),
            Err(SaslError::ServerSignatureMismatch)
        );
        for (i, v) in [(0usize, 6u8), (2, 0), (2, 3), (3, 0)] {
            let mut t = good.clone();
            t[i] = v;
            assert!(
                matches!(unwrap_acceptor(&t, fake), Err(SaslError::Malformed { .. })),
                "{i}={v}"
            );
        }
        let mut big_ec = good.clone();
        big_ec[4] = 0xFF;
        assert!(unwrap_acceptor(&big_ec, fake).is_err());
        for cut in 0..good.len() {
            assert!(unwrap_acceptor(&good[..cut], fake).is_err(), "cut {cut}");
        }
        // Our own token reflected back is refused (no acceptor flag).
        let ours = wrap_initiator(&[1, 0, 0, 0], 42, false, fake).unwrap();
        assert!(unwrap_acceptor(&ours, fake).is_err());
    }
}
