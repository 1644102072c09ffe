//! Kerberos context checks without a KDC: GSS framing, the AP-REP check
//! (mutual authentication) with tokens built here, wrap tokens, krb5.conf.

use super::*;
use picky_asn1::date::GeneralizedTime;
use picky_asn1::wrapper::{
    ExplicitContextTag0, ExplicitContextTag1, ExplicitContextTag2, ExplicitContextTag3, GeneralizedTimeAsn1,
    IntegerAsn1, OctetStringAsn1, Optional,
};
use picky_asn1_der::application_tag::ApplicationTag;
use picky_krb::data_types::{EncApRepPartInner, EncryptedData, EncryptionKey};
use picky_krb::messages::ApRepInner;

const SESSION: [u8; 32] = [7; 32];

fn time(second: u8) -> GeneralizedTimeAsn1 {
    GeneralizedTimeAsn1::from(GeneralizedTime::new(2026, 12, 6, 3, 40, second).unwrap())
}

fn gss_frame(id: [u8; 2], body: &[u8]) -> Vec<u8> {
    let mut inner = KRB5_OID.to_vec();
    inner.extend_from_slice(&id);
    inner.extend_from_slice(body);
    let mut out = vec![0x60];
    if inner.len() < 0x80 {
        out.push(inner.len() as u8);
    } else {
        out.push(0x82);
        out.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    }
    out.extend_from_slice(&inner);
    out
}

/// An AP-REP token as an acceptor would send it, encrypted under `key`.
fn ap_rep(key: &[u8], ctime: u8, cusec: u32, subkey: Option<&[u8]>, seq: Option<u32>) -> Vec<u8> {
    let part: picky_krb::data_types::EncApRepPart = ApplicationTag(EncApRepPartInner {
        ctime: ExplicitContextTag0(time(ctime)),
        cusec: ExplicitContextTag1(IntegerAsn1::from_bytes_be_unsigned(cusec.to_be_bytes().to_vec())),
        subkey: Optional(subkey.map(|k| {
            ExplicitContextTag2(EncryptionKey {
                key_type: ExplicitContextTag0(IntegerAsn1::from_bytes_be_unsigned(vec![18])),
                key_value: ExplicitContextTag1(OctetStringAsn1::from(k.to_vec())),
            })
        })),
        seq_number: Optional(
            seq.map(|s| ExplicitContextTag3(IntegerAsn1::from_bytes_be_unsigned(s.to_be_bytes().to_vec()))),
        ),
    });
    let plain = picky_asn1_der::to_vec(&part).unwrap();
    let cipher = CipherSuite::Aes256CtsHmacSha196
        .cipher()
        .encrypt(key, 12, &plain)
        .unwrap();
    let rep: picky_krb::messages::ApRep = ApplicationTag(ApRepInner {
        pvno: ExplicitContextTag0(IntegerAsn1::from_bytes_be_unsigned(vec![5])),
        msg_type: ExplicitContextTag1(IntegerAsn1::from_bytes_be_unsigned(vec![15])),
        enc_part: ExplicitContextTag2(EncryptedData {
            etype: ExplicitContextTag0(IntegerAsn1::from_bytes_be_unsigned(vec![18])),
            kvno: Optional(None),
            cipher: ExplicitContextTag2(OctetStringAsn1::from(cipher)),
        }),
    });
    gss_frame(TOK_AP_REP, &picky_asn1_der::to_vec(&rep).unwrap())
}

fn ours(ctime: u8, cusec: u64) -> OurAuthenticator {
    OurAuthenticator {
        ctime: encode(&time(ctime)).unwrap(),
        cusec,
        subkey: Some((CipherSuite::Aes256CtsHmacSha196, Key::new(&[3; 32]))),
        seq: 77,
    }
}

fn context(ours: OurAuthenticator) -> KerberosContext {
    KerberosContext {
        ap_req: Some(b"ap-req".to_vec()),
        session_key: Key::new(&SESSION),
        session_cipher: CipherSuite::Aes256CtsHmacSha196,
        ours,
        wrap_key: None,
        last_error: None,
    }
}

#[test]
fn the_ap_rep_echoing_our_time_is_accepted() {
    let token = ap_rep(&SESSION, 9, 123_456, None, Some(5));
    let info = verify_ap_rep(&token, &SESSION, &CipherSuite::Aes256CtsHmacSha196, &ours(9, 123_456)).unwrap();
    assert_eq!(info.subkey, None);
    assert_eq!(info.seq, Some(5));
    let info = verify_ap_rep(
        &ap_rep(&SESSION, 9, 123_456, Some(&[4; 32]), None),
        &SESSION,
        &CipherSuite::Aes256CtsHmacSha196,
        &ours(9, 123_456),
    )
    .unwrap();
    assert_eq!(
        info.subkey,
        Some((CipherSuite::Aes256CtsHmacSha196, Key::new(&[4; 32])))
    );
}

#[test]
fn an_ap_rep_with_another_time_or_key_fails_mutual_authentication() {
    let c = CipherSuite::Aes256CtsHmacSha196;
    for (token, what) in [
        (ap_rep(&SESSION, 10, 123_456, None, None), "ctime"),
        (ap_rep(&SESSION, 9, 123_457, None, None), "cusec"),
        (ap_rep(&[8; 32], 9, 123_456, None, None), "key"),
    ] {
        assert_eq!(
            verify_ap_rep(&token, &SESSION, &c, &ours(9, 123_456)),
            Err(KerberosError::MutualAuthentication),
            "{what}"
        );
    }
    // Through the context: the detailed error is kept, the trait's is typed.
    let mut ctx = context(ours(9, 123_456));
    assert_eq!(ctx.step(None).unwrap().token, b"ap-req");
    assert_eq!(
        ctx.step(Some(&ap_rep(&SESSION, 10, 123_456, None, None))),
        Err(SaslError::ServerSignatureMismatch)
    );
    assert_eq!(ctx.last_error, Some(KerberosError::MutualAuthentication));
    assert!(ctx.wrap(b"x").is_err(), "no wrap before the context is established");
}

#[test]
fn hostile_tokens_are_typed_errors() {
    let c = CipherSuite::Aes256CtsHmacSha196;
    let good = ap_rep(&SESSION, 9, 1, None, None);
    for cut in 0..good.len() {
        assert!(
            verify_ap_rep(&good[..cut], &SESSION, &c, &ours(9, 1)).is_err(),
            "cut {cut}"
        );
    }
    let mut wrong_oid = good.clone();
    wrong_oid[5] ^= 1;
    assert!(matches!(
        verify_ap_rep(&wrong_oid, &SESSION, &c, &ours(9, 1)),
        Err(KerberosError::Malformed(_))
    ));
    // An AP-REQ id where an AP-REP belongs.
    let as_req = gss_frame(TOK_AP_REQ, &good[17..]);
    assert!(matches!(
        verify_ap_rep(&as_req, &SESSION, &c, &ours(9, 1)),
        Err(KerberosError::Malformed(_))
    ));
    assert!(verify_ap_rep(&gss_frame(TOK_ERROR, b"\x30\x00"), &SESSION, &c, &ours(9, 1)).is_err());
    // Every single-byte corruption: an error or (never) a panic; only the
    // untouched token passes.
    for i in 0..good.len() {
        for v in [0x00u8, 0x7f, 0x80, 0xff] {
            let mut t = good.clone();
            if t[i] == v {
                continue;
            }
            t[i] = v;
            let _ = verify_ap_rep(&t, &SESSION, &c, &ours(9, 1));
            let _ = read_authenticator(&t, &SESSION, &c);
        }
    }
    // Long DER length forms that lie.
    assert!(gss_unframe(&[0x60, 0x85, 1, 2, 3, 4, 5]).is_err());
    assert!(gss_unframe(&[0x60, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
    assert!(gss_unframe(&[0x60, 0x80]).is_err());
}

#[test]
fn wrap_tokens_use_the_initiator_subkey_when_the_ap_rep_has_none() {
    let mut ctx = context(ours(9, 1));
    ctx.step(None).unwrap();
    let step = ctx.step(Some(&ap_rep(&SESSION, 9, 1, None, None))).unwrap();
    assert!(step.complete && step.token.is_empty());
    let wrapped = ctx.wrap(&[1, 0, 0, 0]).unwrap();
    assert_eq!(&wrapped[..4], &[5, 4, 0, 0xFF], "no acceptor-subkey flag");
    assert_eq!(
        u64::from_be_bytes(wrapped[8..16].try_into().unwrap()),
        77,
        "the authenticator's seq"
    );
    // An acceptor token under the same subkey unwraps; a forged one does not.
    let key = Key::new(&[3; 32]);
    let mut signed = vec![1, 1, 0, 0];
    signed.extend_from_slice(&[5, 4, 1, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    let sum = KerberosContext::checksum(&CipherSuite::Aes256CtsHmacSha196, &key, 22, &signed).unwrap();
    let mut token = vec![5, 4, 1, 0xFF, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 1, 1, 0, 0];
    token.extend_from_slice(&sum);
    assert_eq!(ctx.unwrap(&token).unwrap(), vec![1, 1, 0, 0]);
    let mut forged = token.clone();
    forged[17] = 0;
    assert_eq!(ctx.unwrap(&forged), Err(SaslError::ServerSignatureMismatch));
    assert_eq!(ctx.last_error, Some(KerberosError::MutualAuthentication));
}

#[test]
fn the_acceptor_subkey_wins_and_is_flagged() {
    let mut ctx = context(ours(9, 1));
    ctx.step(None).unwrap();
    ctx.step(Some(&ap_rep(&SESSION, 9, 1, Some(&[4; 32]), Some(3))))
        .unwrap();
    let wrapped = ctx.wrap(&[1, 0, 0, 0]).unwrap();
    assert_eq!(wrapped[2], 0x04, "acceptor-subkey flag");
    let expected = KerberosContext::checksum(
        &CipherSuite::Aes256CtsHmacSha196,
        &Key::new(&[4; 32]),
        24,
        &[1, 0, 0, 0, 5, 4, 4, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 77],
    )
    .unwrap();
    assert_eq!(&wrapped[20..], &expected[..]);
}

#[test]
fn keys_never_print() {
    let ctx = context(ours(9, 1));
    let shown = format!("{ctx:?} {:?} {:?}", ours(9, 1), Key::new(&[0xAB; 4]));
    assert!(!shown.contains("171"), "{shown}");
    assert!(
        !shown.contains("3, 3, 3") && !shown.contains("7, 7, 7"),
        "key bytes: {shown}"
    );
}

#[test]
fn principals_kdcs_and_krb5_conf() {
    assert_eq!(
        split_principal("alice@CLINK.TEST").unwrap(),
        ("alice", Some("CLINK.TEST"))
    );
    assert_eq!(split_principal("svc/host@R").unwrap(), ("svc/host", Some("R")));
    assert_eq!(split_principal("alice").unwrap(), ("alice", None));
    for bad in ["", "@R", "alice@", "a@b@c"] {
        let e = split_principal(bad).unwrap_err().to_string();
        assert!(e.contains(OPT_PRINCIPAL), "{e}");
    }
    assert_eq!(broker_host("127.0.0.1:9092"), "127.0.0.1");
    assert_eq!(broker_host("[::1]:9092"), "::1");
    let conf = "[libdefaults]\n default_realm = A\n[realms]\n  OTHER = {\n kdc = other:1\n }\n  \
                CLINK.TEST = {\n    kdc = 127.0.0.1:18088 # the test KDC\n    kdc = second:88\n  }\n  NOPORT = {\n kdc = k.example\n }\n";
    assert_eq!(krb5_conf_kdc(conf, "CLINK.TEST").as_deref(), Some("127.0.0.1:18088"));
    assert_eq!(krb5_conf_kdc(conf, "NOPORT").as_deref(), Some("k.example:88"));
    assert_eq!(krb5_conf_kdc(conf, "MISSING"), None);
    assert_eq!(der_uint(&[0, 0x80]).unwrap(), 128);
    assert!(der_uint(&[0x80]).is_err());
    assert!(der_uint(&[1; 9]).is_err());
    assert_eq!(der_int(&[18]).unwrap(), 18);
    assert_eq!(der_int(&[0xff]).unwrap(), -1);
}

#[test]
fn configuration_errors_name_the_option() {
    let ok = KerberosConfig::new("alice@CLINK.TEST", "/k.keytab");
    ok.validate().unwrap();
    for (config, option) in [
        (
            KerberosConfig {
                service_name: "kafka/x".into(),
                ..ok.clone()
            },
            OPT_SERVICE_NAME,
        ),
        (
            KerberosConfig {
                principal: "".into(),
                ..ok.clone()
            },
            OPT_PRINCIPAL,
        ),
        (
            KerberosConfig {
                keytab: PathBuf::new(),
                ..ok.clone()
            },
            OPT_KEYTAB,
        ),
        (
            KerberosConfig {
                kdc: Some("no-port".into()),
                ..ok.clone()
            },
            OPT_KDC,
        ),
    ] {
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains(option), "{e}");
    }
}

#[tokio::test]
async fn a_missing_keytab_and_an_unreachable_kdc_are_clear_and_bounded() {
    let dir = std::env::temp_dir().join(format!("clink-krb-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = KerberosConfig::new("alice@R", dir.join("missing.keytab"));
    let e = initiate(&missing, "h").await.unwrap_err();
    assert!(matches!(e, KerberosError::Keytab { .. }), "{e}");
    // A keytab with one aes256 entry for alice@R, kvno 1.
    let mut kt = vec![5, 2];
    let mut entry = Vec::new();
    entry.extend_from_slice(&1u16.to_be_bytes());
    entry.extend_from_slice(&1u16.to_be_bytes());
    entry.extend_from_slice(b"R");
    entry.extend_from_slice(&5u16.to_be_bytes());
    entry.extend_from_slice(b"alice");
    entry.extend_from_slice(&1u32.to_be_bytes());
    entry.extend_from_slice(&0u32.to_be_bytes());
    entry.push(1);
    entry.extend_from_slice(&18u16.to_be_bytes());
    entry.extend_from_slice(&32u16.to_be_bytes());
    entry.extend_from_slice(&[9; 32]);
    kt.extend_from_slice(&(entry.len() as i32).to_be_bytes());
    kt.extend_from_slice(&entry);
    let path = dir.join("alice.keytab");
    std::fs::write(&path, &kt).unwrap();
    // A closed port: refused at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut config = KerberosConfig::new("alice@R", &path);
    config.kdc = Some(format!("127.0.0.1:{port}"));
    let e = initiate(&config, "h").await.unwrap_err();
    assert!(matches!(e, KerberosError::KdcUnreachable { .. }), "{e}");
    // A KDC that accepts and never answers: the timeout bounds it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    config.kdc = Some(silent.local_addr().unwrap().to_string());
    config.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let e = initiate(&config, "h").await.unwrap_err();
    assert!(matches!(e, KerberosError::Timeout(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Another principal than the keytab's.
    let other = KerberosConfig::new("bob@R", &path);
    let e = initiate(&other, "h").await.unwrap_err().to_string();
    assert!(e.contains("no entry") && e.contains("sasl.kerberos.principal"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
