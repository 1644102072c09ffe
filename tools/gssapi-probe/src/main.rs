//! GSSAPI spike (issue 25), run by hand; not part of the workspace or CI.
//!
//!     eval "$(scripts/kdc-local env)"
//!     cargo run --manifest-path tools/gssapi-probe/Cargo.toml
//!
//! Result on 2026-12-06 against kdc-local (alice +requires_preauth) and the
//! KRB listener (127.0.0.1:19156): AS + TGS via sspi with alice's keytab key
//! (KeytabIdentity) over our TCP transport; the broker accepts the AP-REQ;
//! sspi refuses the broker's AP-REP ("missing sub-key"), so:
//! - the AP-REP is decrypted with the ticket session key
//!   (`query_context_session_key` right after the first step), usage 12;
//! - the initiator subkey and sequence number, which sspi keeps to itself,
//!   are read back from our own AP-REQ's authenticator (session key, usage 11);
//! - RFC 4121 Wrap tokens without confidentiality use that subkey, usage 22
//!   (acceptor seal) / 24 (initiator seal), the checksum over data + header
//!   with EC and RRC both zeroed (as MIT and Java compute it), EC = 12 in the
//!   sent header, SND_SEQ = the authenticator's sequence number.
//! The broker's offer unwraps to [01, 01, 00, 00] (no layer, 64 KiB); our
//! wrapped [01, 00, 00, 00] is accepted (SaslAuthenticate error 0) and a
//! Metadata request is then answered. Indexing and unwraps: a spike only.
use std::io::{Read, Write};
use std::net::TcpStream;

use picky_krb::crypto::CipherSuite;
use sspi::network_client::NetworkClient;
use sspi::{
    BufferType, ClientRequestFlags, Credentials, DataRepresentation, Kerberos, KerberosConfig, KeytabIdentity,
    Secret, SecurityBuffer, Sspi, SspiImpl, Username,
};

struct Tcp;
impl NetworkClient for Tcp {
    fn send(&self, r: &sspi::generator::NetworkRequest) -> sspi::Result<Vec<u8>> {
        eprintln!("KDC request {:?} {} bytes", r.url.as_str(), r.data.len());
        let addr = format!("{}:{}", r.url.host_str().unwrap(), r.url.port().unwrap());
        let mut s = TcpStream::connect(addr)?;
        s.write_all(&r.data)?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        let n = u32::from_be_bytes(len) as usize;
        assert!(n < 65536);
        let mut buf = len.to_vec();
        buf.resize(4 + n, 0);
        s.read_exact(&mut buf[4..])?;
        eprintln!("KDC reply {} bytes", buf.len());
        Ok(buf)
    }
}

fn main() {
    let kt = std::fs::read(std::env::var("CLINK_KAFKA_KRB5_CLIENT_KEYTAB").unwrap()).unwrap();
    // First entry of a one-principal keytab: enctype 18 key at bytes 40..72
    // (the client uses clink_kafka_wire::sasl::keytab instead).
    let key = kt[40..72].to_vec();
    let ident = KeytabIdentity {
        principal: Username::new("alice", Some("CLINK.TEST")).unwrap(),
        key: Secret::new(key),
        key_enctype: CipherSuite::Aes256CtsHmacSha196,
    };
    let creds: Credentials = ident.into();
    let config = KerberosConfig::new_with_kdc_url("tcp://127.0.0.1:18088", "client".into());
    let mut k = Kerberos::new_client_from_config(config).unwrap();
    let mut ch = k
        .acquire_credentials_handle()
        .with_credential_use(sspi::CredentialUse::Outbound)
        .with_auth_data(&creds)
        .execute(&mut k)
        .unwrap()
        .credentials_handle;
    let mut input = vec![SecurityBuffer::new(Vec::new(), BufferType::Token)];
    let mut output = vec![SecurityBuffer::new(Vec::new(), BufferType::Token)];
    let mut b = k
        .initialize_security_context()
        .with_credentials_handle(&mut ch)
        .with_context_requirements(ClientRequestFlags::MUTUAL_AUTH | ClientRequestFlags::INTEGRITY)
        .with_target_data_representation(DataRepresentation::Native)
        .with_target_name("kafka/127.0.0.1")
        .with_input(&mut input)
        .with_output(&mut output);
    let r = k.initialize_security_context_impl(&mut b).unwrap().resolve_with_client(&Tcp);
    let r = r.unwrap();
    println!("status {:?}, token {} bytes", r.status, output[0].buffer.len());
    let token = output[0].buffer.clone();
    // Kafka: SaslHandshake v1 + SaslAuthenticate v0 on the KRB listener.
    let mut k2 = TcpStream::connect("127.0.0.1:19156").unwrap();
    let mut body = Vec::new();
    body.extend_from_slice(&(6u16).to_be_bytes());
    body.extend_from_slice(b"GSSAPI");
    let resp = kreq(&mut k2, 17, 1, 1, &body);
    println!("handshake resp error {:02x?}", &resp[4..6]);
    let mut body = (token.len() as u32).to_be_bytes().to_vec();
    body.extend_from_slice(&token);
    let resp = kreq(&mut k2, 36, 0, 2, &body);
    let err = i16::from_be_bytes([resp[4], resp[5]]);
    let mlen = i16::from_be_bytes([resp[6], resp[7]]);
    let mut pos = 8;
    if mlen > 0 { println!("msg {}", String::from_utf8_lossy(&resp[8..8 + mlen as usize])); pos += mlen as usize; }
    let blen = u32::from_be_bytes(resp[pos..pos + 4].try_into().unwrap()) as usize;
    let srv = resp[pos + 4..pos + 4 + blen].to_vec();
    println!("authenticate error {err}, server token {} bytes", srv.len());
    let sk = k.query_context_session_key().unwrap();
    println!("context key {} bytes", sk.session_key.as_ref().len());
    // AP-REP inside the GSS framing: 0x60 len, OID, 02 00, then AP-REP.
    let inner = {
        let oid_at = srv.iter().position(|&b| b == 0x06).unwrap();
        let oid_len = srv[oid_at + 1] as usize;
        &srv[oid_at + 2 + oid_len + 2..]
    };
    let ap_rep: picky_krb::messages::ApRep = picky_asn1_der::from_bytes(inner).unwrap();
    let cipher = CipherSuite::Aes256CtsHmacSha196.cipher();
    match cipher.decrypt(sk.session_key.as_ref(), 12, &ap_rep.0.enc_part.cipher.0.0) {
        Ok(p) => {
            let part: picky_krb::data_types::EncApRepPart = picky_asn1_der::from_bytes(&p).unwrap();
            println!("AP-REP decrypted: subkey {:?} seq {:?}", part.0.subkey.0.is_some(), part.0.seq_number.0.as_ref().map(|s| s.0.0.clone()));
        }
        Err(e) => println!("AP-REP decrypt with context key failed: {e:?}"),
    }
    // Our own AP-REQ's authenticator, decrypted with the session key (usage 11): its subkey and seq.
    let (key, seq) = {
        let oid_at = token.iter().position(|&b| b == 0x06).unwrap();
        let oid_len = token[oid_at + 1] as usize;
        let ap_req: picky_krb::messages::ApReq = picky_asn1_der::from_bytes(&token[oid_at + 2 + oid_len + 2..]).unwrap();
        let plain = cipher.decrypt(sk.session_key.as_ref(), 11, &ap_req.0.authenticator.0.cipher.0.0).unwrap();
        let auth: picky_krb::data_types::Authenticator = picky_asn1_der::from_bytes(&plain).unwrap();
        let subkey = auth.0.subkey.0.as_ref().unwrap().0.key_value.0.0.clone();
        let seq = auth.0.seq_number.0.as_ref().map(|s| s.0.0.clone()).unwrap_or_default();
        println!("authenticator subkey {} bytes, seq {:?}", subkey.len(), seq);
        let mut n = 0u64;
        for b in seq { n = (n << 8) | b as u64; }
        (subkey, n)
    };
    let h = picky_krb::crypto::ChecksumSuite::HmacSha196Aes256.hasher();
    // Empty response; the broker answers with its wrapped layer offer.
    let resp = kreq(&mut k2, 36, 0, 3, &0u32.to_be_bytes());
    let err = i16::from_be_bytes([resp[4], resp[5]]);
    let mlen = i16::from_be_bytes([resp[6], resp[7]]);
    let mut pos = 8;
    if mlen > 0 { println!("msg {}", String::from_utf8_lossy(&resp[8..8 + mlen as usize])); pos += mlen as usize; }
    let blen = u32::from_be_bytes(resp[pos..pos + 4].try_into().unwrap()) as usize;
    let tok = resp[pos + 4..pos + 4 + blen].to_vec();
    println!("offer error {err}, token {} bytes: {:02x?}", tok.len(), &tok[..16.min(tok.len())]);
    // RFC 4121 Wrap, no confidentiality: header 16, data, checksum (EC bytes), RRC rotation.
    let ec = u16::from_be_bytes([tok[4], tok[5]]) as usize;
    let rrc = u16::from_be_bytes([tok[6], tok[7]]) as usize;
    let mut body = tok[16..].to_vec();
    let bl = body.len();
    body.rotate_left(rrc % bl);
    let (data, cks) = body.split_at(body.len() - ec);
    let mut hdr = tok[..16].to_vec();
    hdr[4] = 0; hdr[5] = 0; hdr[6] = 0; hdr[7] = 0;
    let mut signed = data.to_vec();
    signed.extend_from_slice(&hdr);
    let expect = h.checksum(&key, 22, &signed).unwrap();
    println!("offer data {:02x?}, checksum ok {}", data, expect == cks);
    // Our answer: layer 1, size 0, no authz id.
    let answer = [1u8, 0, 0, 0];
    let mut hdr = vec![0x05, 0x04, 0x00, 0xff, 0, 0, 0, 0];
    hdr.extend_from_slice(&seq.to_be_bytes());
    let mut signed = answer.to_vec();
    signed.extend_from_slice(&hdr);
    let c = h.checksum(&key, 24, &signed).unwrap();
    hdr[5] = 12;
    let mut wrapped = hdr.clone();
    wrapped.extend_from_slice(&answer);
    wrapped.extend_from_slice(&c);
    let mut b2 = (wrapped.len() as u32).to_be_bytes().to_vec();
    b2.extend_from_slice(&wrapped);
    let resp = kreq(&mut k2, 36, 0, 4, &b2);
    let err = i16::from_be_bytes([resp[4], resp[5]]);
    let mlen = i16::from_be_bytes([resp[6], resp[7]]);
    if mlen > 0 { println!("msg {}", String::from_utf8_lossy(&resp[8..8 + mlen as usize])); }
    println!("final authenticate error {err}");
    // Proof: Metadata v1 (all topics) on the authenticated connection.
    let resp = kreq(&mut k2, 3, 1, 5, &(-1i32).to_be_bytes());
    println!("metadata response {} bytes", resp.len());
    let mut input = vec![SecurityBuffer::new(srv, BufferType::Token)];
    let mut output = vec![SecurityBuffer::new(Vec::new(), BufferType::Token)];
    let mut b = k
        .initialize_security_context()
        .with_credentials_handle(&mut ch)
        .with_context_requirements(ClientRequestFlags::MUTUAL_AUTH | ClientRequestFlags::INTEGRITY)
        .with_target_data_representation(DataRepresentation::Native)
        .with_target_name("kafka/127.0.0.1")
        .with_input(&mut input)
        .with_output(&mut output);
    let r = k.initialize_security_context_impl(&mut b).unwrap().resolve_with_client(&Tcp);
    match r {
        Ok(r) => println!("step2 status {:?}, out {} bytes", r.status, output[0].buffer.len()),
        Err(e) => println!("step2 error {e}"),
    }
}

fn kreq(s: &mut TcpStream, key: i16, ver: i16, corr: i32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&key.to_be_bytes());
    m.extend_from_slice(&ver.to_be_bytes());
    m.extend_from_slice(&corr.to_be_bytes());
    m.extend_from_slice(&(5i16).to_be_bytes());
    m.extend_from_slice(b"probe");
    m.extend_from_slice(body);
    let mut f = (m.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&m);
    s.write_all(&f).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut buf = vec![0; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).unwrap();
    buf
}
