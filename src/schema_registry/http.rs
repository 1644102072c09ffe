//! The HTTP/1.1 a Schema Registry client needs, sans-IO: a request encoder
//! and a bounded response parser (RFC 9112: status line, headers,
//! `Content-Length`, `Transfer-Encoding: chunked`, or a body read to the
//! close). One request per connection (`Connection: close`), so there is no
//! pipelining or keep-alive state to get wrong.
//!
//! Why our own: the registry speaks a handful of JSON requests, and the
//! HTTP crates that fit (hyper + hyper-util, ureq) bring their own TLS
//! stacks or a second connection layer beside the client's rustls one;
//! these ~200 lines keep one TLS stack (the Kafka client's rustls +
//! graviola, private CA included) and are fuzzable as a pure function.

use std::fmt;

/// The largest header section accepted.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// An HTTP answer: status and body (headers are consumed by the parser).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The body, de-chunked, at most `max_body` bytes (see [`parse_response`]).
    pub body: Vec<u8>,
}

/// A response that is not HTTP/1.x as we read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpError(pub String);

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(what: impl Into<String>) -> HttpError {
    HttpError(what.into())
}

/// Encodes one request. `authorization` is the full header value (the
/// caller builds it from a secret and drops the buffer after writing).
pub fn encode_request(
    method: &str,
    host: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + body.map_or(0, <[u8]>::len));
    out.extend_from_slice(format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n").as_bytes());
    out.extend_from_slice(b"Accept: application/vnd.schemaregistry.v1+json, application/json\r\n");
    out.extend_from_slice(b"User-Agent: clink-kafka\r\nConnection: close\r\n");
    if let Some(a) = authorization {
        out.extend_from_slice(b"Authorization: ");
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(b) = body {
        out.extend_from_slice(b"Content-Type: application/vnd.schemaregistry.v1+json\r\n");
        out.extend_from_slice(format!("Content-Length: {}\r\n", b.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    if let Some(b) = body {
        out.extend_from_slice(b);
    }
    out
}

enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// Parses `buf`, everything received so far. `Ok(None)`: need more bytes
/// (`closed` false) — once the peer has closed, an incomplete response is
/// an error, and a body without a length ends there. Bodies above
/// `max_body` bytes are refused before they are buffered whole.
pub fn parse_response(buf: &[u8], closed: bool, max_body: usize) -> Result<Option<Response>, HttpError> {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        if buf.len() > MAX_HEADER_BYTES {
            return Err(bad(format!("no end of the headers within {MAX_HEADER_BYTES} bytes")));
        }
        return if closed {
            Err(bad(format!(
                "the connection closed after {} bytes, before the end of the headers",
                buf.len()
            )))
        } else {
            Ok(None)
        };
    };
    if head_end > MAX_HEADER_BYTES {
        return Err(bad(format!("headers longer than {MAX_HEADER_BYTES} bytes")));
    }
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| bad("headers are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(bad(format!("not an HTTP/1.x status line: {:?}", truncate(status_line))));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..600).contains(s))
        .ok_or_else(|| bad(format!("no status code in {:?}", truncate(status_line))))?;
    let mut framing = Framing::UntilClose;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad(format!("malformed header line {:?}", truncate(line))))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| bad(format!("bad Content-Length {:?}", truncate(value))))?;
            if matches!(framing, Framing::Length(m) if m != n) {
                return Err(bad("conflicting Content-Length headers"));
            }
            if !matches!(framing, Framing::Chunked) {
                framing = Framing::Length(n);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if value.eq_ignore_ascii_case("chunked") {
                framing = Framing::Chunked;
            } else {
                return Err(bad(format!("unsupported Transfer-Encoding {:?}", truncate(value))));
            }
        }
    }
    let body = &buf[head_end + 4..];
    let done = |body: Vec<u8>| Ok(Some(Response { status, body }));
    match framing {
        Framing::Length(n) => {
            if n > max_body {
                return Err(bad(format!("a body of {n} bytes, above the bound of {max_body}")));
            }
            if body.len() >= n {
                done(body[..n].to_vec())
            } else if closed {
                Err(bad(format!(
                    "the connection closed after {} of {n} body bytes",
                    body.len()
                )))
            } else {
                Ok(None)
            }
        }
        Framing::UntilClose => {
            if body.len() > max_body {
                Err(bad(format!("a body above the bound of {max_body} bytes")))
            } else if closed {
                done(body.to_vec())
            } else {
                Ok(None)
            }
        }
        Framing::Chunked => match dechunk(body, max_body)? {
            Some(b) => done(b),
            None if closed => Err(bad("the connection closed inside a chunked body")),
            None => Ok(None),
        },
    }
}

/// Decodes a chunked body; `None` until the last chunk and the trailer end.
fn dechunk(mut rest: &[u8], max_body: usize) -> Result<Option<Vec<u8>>, HttpError> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = find(rest, b"\r\n") else {
            if rest.len() > 1024 {
                return Err(bad("a chunk size line longer than 1024 bytes"));
            }
            return Ok(None);
        };
        let line = std::str::from_utf8(&rest[..line_end]).map_err(|_| bad("a chunk size is not text"))?;
        let hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(hex, 16)
            .ok()
            .filter(|_| !hex.is_empty() && hex.len() <= 8)
            .ok_or_else(|| bad(format!("bad chunk size {:?}", truncate(line))))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            // Trailer fields (usually none), then the empty line.
            loop {
                let Some(end) = find(rest, b"\r\n") else {
                    return Ok(None);
                };
                if end == 0 {
                    return Ok(Some(out));
                }
                rest = &rest[end + 2..];
            }
        }
        if out.len() + size > max_body {
            return Err(bad(format!("a chunked body above the bound of {max_body} bytes")));
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        if &rest[size..size + 2] != b"\r\n" {
            return Err(bad("a chunk does not end with CRLF"));
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(80) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Percent-encodes one path segment (a subject name may hold `/`, spaces…).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_bodies_and_partial_input() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello";
        for cut in 0..r.len() {
            assert_eq!(parse_response(&r[..cut], false, 100).unwrap(), None, "{cut}");
            assert!(parse_response(&r[..cut], true, 100).is_err(), "{cut}");
        }
        let got = parse_response(r, false, 100).unwrap().unwrap();
        assert_eq!((got.status, &got.body[..]), (200, &b"hello"[..]));
        assert!(parse_response(r, false, 4).is_err(), "above the body bound");
    }

    #[test]
    fn chunked_and_until_close() {
        let r = b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let got = parse_response(r, false, 100).unwrap().unwrap();
        assert_eq!((got.status, &got.body[..]), (404, &b"abcde"[..]));
        assert_eq!(parse_response(&r[..r.len() - 2], false, 100).unwrap(), None);
        assert!(parse_response(&r[..r.len() - 2], true, 100).is_err());
        assert!(parse_response(r, false, 4).is_err());
        let r = b"HTTP/1.0 500 Oops\r\n\r\nbody";
        assert_eq!(parse_response(r, false, 100).unwrap(), None);
        assert_eq!(parse_response(r, true, 100).unwrap().unwrap().body, b"body");
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        for g in [
            &b"garbage\r\n\r\n"[..],
            b"HTTP/1.1 abc\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        ] {
            assert!(
                parse_response(g, true, 100).is_err(),
                "{:?}",
                String::from_utf8_lossy(g)
            );
        }
        assert!(parse_response(&vec![b'a'; MAX_HEADER_BYTES + 1], false, 100).is_err());
    }

    #[test]
    fn requests_carry_the_body_length_and_segments_are_escaped() {
        let r = encode_request("POST", "h:1", "/a", Some("Basic eA=="), Some(b"{}"));
        let s = String::from_utf8(r).unwrap();
        assert!(s.starts_with("POST /a HTTP/1.1\r\nHost: h:1\r\n"), "{s}");
        assert!(s.contains("Content-Length: 2\r\n") && s.ends_with("\r\n\r\n{}"), "{s}");
        assert_eq!(encode_segment("a b/c-value"), "a%20b%2Fc-value");
    }
}
