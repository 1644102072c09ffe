//! MIT keytab files (format version `0x0502`), parsed from bytes.
//!
//! Layout (big-endian): a 2-byte version, then entries, each a signed 4-byte
//! size (negative: a hole of that many bytes to skip) followed by the
//! principal (component count, realm, components, name type), a timestamp,
//! an 8-bit key version number, the key block (enctype, key bytes) and an
//! optional 32-bit key version number that overrides the 8-bit one.
//!
//! Every length is checked against the bytes actually present before use;
//! the file and the entry count are bounded. Keys print as `***` in `Debug`
//! and are zeroed on drop. Errors never contain key bytes.

use std::fmt;

/// The largest keytab accepted, in bytes.
pub const MAX_KEYTAB_BYTES: usize = 1024 * 1024;

/// The most entries accepted.
pub const MAX_KEYTAB_ENTRIES: usize = 4096;

/// Why a keytab could not be read.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeytabError {
    /// The file is larger than [`MAX_KEYTAB_BYTES`].
    #[error("keytab of {0} bytes exceeds the maximum of {MAX_KEYTAB_BYTES}")]
    TooLarge(usize),
    /// Not a version 0x0502 keytab.
    #[error("unsupported keytab version {0:#06x}; only MIT keytab version 0x0502 is supported")]
    Version(u16),
    /// An entry is cut short or its lengths do not fit.
    #[error("malformed keytab entry at byte {offset}: {message}")]
    Malformed {
        /// Byte offset of the entry.
        offset: usize,
        /// What is wrong.
        message: &'static str,
    },
    /// More than [`MAX_KEYTAB_ENTRIES`] entries.
    #[error("keytab has more than {MAX_KEYTAB_ENTRIES} entries")]
    TooManyEntries,
}

/// A long-term key (Debug prints `***`; zeroed on drop).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyBytes(Vec<u8>);

impl KeyBytes {
    /// The key bytes.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for KeyBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Drop for KeyBytes {
    fn drop(&mut self) {
        let capacity = self.0.capacity();
        self.0.clear();
        self.0.resize(capacity, 0);
        std::hint::black_box(&mut self.0);
    }
}

/// One keytab entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeytabEntry {
    /// The realm, e.g. `CLINK.TEST`.
    pub realm: String,
    /// The principal's name components, e.g. `["kafka", "127.0.0.1"]`.
    pub components: Vec<String>,
    /// The principal name type (1 = `NT-PRINCIPAL`).
    pub name_type: u32,
    /// Seconds since the epoch when the key was written.
    pub timestamp: u32,
    /// The key version number.
    pub kvno: u32,
    /// The Kerberos encryption type (e.g. 18 = aes256-cts-hmac-sha1-96).
    pub enctype: u16,
    /// The key.
    pub key: KeyBytes,
}

impl KeytabEntry {
    /// `name/instance@REALM`.
    pub fn principal(&self) -> String {
        format!("{}@{}", self.components.join("/"), self.realm)
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    entry: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, message: &'static str) -> KeytabError {
        KeytabError::Malformed {
            offset: self.entry,
            message,
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], KeytabError> {
        let out = self
            .pos
            .checked_add(n)
            .and_then(|end| self.data.get(self.pos..end))
            .ok_or_else(|| self.err("field runs past the end of the entry"))?;
        self.pos = self.pos.saturating_add(n);
        Ok(out)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], KeytabError> {
        let b = self.take(N)?;
        b.try_into()
            .map_err(|_| self.err("field runs past the end of the entry"))
    }
    fn u8(&mut self) -> Result<u8, KeytabError> {
        Ok(u8::from_be_bytes(self.array()?))
    }
    fn u16(&mut self) -> Result<u16, KeytabError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, KeytabError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }
    fn octets(&mut self) -> Result<&'a [u8], KeytabError> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
    fn text(&mut self) -> Result<String, KeytabError> {
        let b = self.octets()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err("principal text is not UTF-8"))
    }
}

/// Parses a whole keytab file.
pub fn parse_keytab(data: &[u8]) -> Result<Vec<KeytabEntry>, KeytabError> {
    if data.len() > MAX_KEYTAB_BYTES {
        return Err(KeytabError::TooLarge(data.len()));
    }
    let Some((version, _)) = data.split_first_chunk::<2>() else {
        return Err(KeytabError::Malformed {
            offset: 0,
            message: "shorter than the 2-byte version",
        });
    };
    let version = u16::from_be_bytes(*version);
    if version != 0x0502 {
        return Err(KeytabError::Version(version));
    }
    let mut entries = Vec::new();
    let mut pos = 2usize;
    while let Some(rest) = data.get(pos..).filter(|r| !r.is_empty()) {
        // A trailing partial size field: MIT writes none, treat as corrupt.
        let Some((size, after)) = rest.split_first_chunk::<4>() else {
            return Err(KeytabError::Malformed {
                offset: pos,
                message: "truncated entry size",
            });
        };
        let size = i32::from_be_bytes(*size);
        let len = usize::try_from(size.unsigned_abs()).unwrap_or(usize::MAX);
        let body = after.get(..len).ok_or(KeytabError::Malformed {
            offset: pos,
            message: "entry size runs past the end of the file",
        })?;
        let body_end = pos.saturating_add(4).saturating_add(len);
        if size > 0 {
            if entries.len() == MAX_KEYTAB_ENTRIES {
                return Err(KeytabError::TooManyEntries);
            }
            entries.push(parse_entry(body, pos)?);
        } else if size == 0 {
            // MIT stops at a zero size (end of data).
            break;
        }
        pos = body_end;
    }
    Ok(entries)
}

fn parse_entry(body: &[u8], offset: usize) -> Result<KeytabEntry, KeytabError> {
    let mut r = Reader {
        data: body,
        pos: 0,
        entry: offset,
    };
    let count = r.u16()?;
    let realm = r.text()?;
    let mut components = Vec::with_capacity(usize::from(count).min(16));
    for _ in 0..count {
        components.push(r.text()?);
    }
    let name_type = r.u32()?;
    let timestamp = r.u32()?;
    let kvno8 = r.u8()?;
    let enctype = r.u16()?;
    let key = KeyBytes(r.octets()?.to_vec());
    let kvno = if r.remaining() >= 4 {
        match r.u32()? {
            0 => u32::from(kvno8),
            v => v,
        }
    } else {
        u32::from(kvno8)
    };
    Ok(KeytabEntry {
        realm,
        components,
        name_type,
        timestamp,
        kvno,
        enctype,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(realm: &str, comps: &[&str], enctype: u16, key: &[u8], kvno32: Option<u32>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(comps.len() as u16).to_be_bytes());
        b.extend_from_slice(&(realm.len() as u16).to_be_bytes());
        b.extend_from_slice(realm.as_bytes());
        for c in comps {
            b.extend_from_slice(&(c.len() as u16).to_be_bytes());
            b.extend_from_slice(c.as_bytes());
        }
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&7u32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&enctype.to_be_bytes());
        b.extend_from_slice(&(key.len() as u16).to_be_bytes());
        b.extend_from_slice(key);
        if let Some(v) = kvno32 {
            b.extend_from_slice(&v.to_be_bytes());
        }
        let mut out = (b.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&b);
        out
    }

    #[test]
    fn parses_entries_holes_and_kvno() {
        let mut file = vec![5, 2];
        file.extend(entry("CLINK.TEST", &["alice"], 18, &[9; 32], None));
        file.extend_from_slice(&(-3i32).to_be_bytes());
        file.extend_from_slice(&[0, 0, 0]);
        file.extend(entry("CLINK.TEST", &["kafka", "127.0.0.1"], 17, &[1; 16], Some(300)));
        let e = parse_keytab(&file).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].principal(), "alice@CLINK.TEST");
        assert_eq!((e[0].enctype, e[0].kvno, e[0].key.expose()), (18, 2, &[9u8; 32][..]));
        assert_eq!(e[1].principal(), "kafka/127.0.0.1@CLINK.TEST");
        assert_eq!(e[1].kvno, 300);
        assert!(!format!("{e:?}").contains("9, 9"));
    }

    #[test]
    fn refuses_hostile_bytes() {
        assert_eq!(parse_keytab(&[5, 1]), Err(KeytabError::Version(0x0501)));
        assert!(matches!(parse_keytab(&[5]), Err(KeytabError::Malformed { .. })));
        let full = {
            let mut f = vec![5, 2];
            f.extend(entry("R", &["a"], 18, &[9; 32], None));
            f
        };
        for cut in 3..full.len() {
            assert!(parse_keytab(&full[..cut]).is_err(), "cut {cut}");
        }
        let mut huge = vec![5, 2];
        huge.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(parse_keytab(&huge), Err(KeytabError::Malformed { .. })));
        let mut neg = vec![5, 2];
        neg.extend_from_slice(&i32::MIN.to_be_bytes());
        assert!(parse_keytab(&neg).is_err());
        assert!(matches!(
            parse_keytab(&vec![0; MAX_KEYTAB_BYTES + 1]),
            Err(KeytabError::TooLarge(_))
        ));
    }

    /// The keytab made by scripts/kdc-local, when present.
    #[test]
    fn parses_kdc_local_keytab() {
        let Some(path) = std::env::var_os("CLINK_KAFKA_KRB5_CLIENT_KEYTAB") else {
            // The same rule as tests/common's broker_required: CI=true or 1.
            assert!(
                !matches!(std::env::var("CI").as_deref(), Ok("true" | "1")),
                "CI=true but CLINK_KAFKA_KRB5_CLIENT_KEYTAB is unset (eval \"$(scripts/kdc-local env)\")"
            );
            return;
        };
        let data = std::fs::read(path).unwrap();
        let entries = parse_keytab(&data).unwrap();
        assert!(!entries.is_empty());
        assert!(entries.iter().all(|e| e.principal() == "alice@CLINK.TEST"));
        assert!(entries.iter().any(|e| e.enctype == 18 && e.key.expose().len() == 32));
    }
}
