//! Compression cost on a realistic payload: the records section of one
//! produce batch of seeded, JSON-like events, compressed with each codec
//! through `compression::compress`, the call the producer makes.
//!
//! The payload: events of about 250-1,000 bytes (order, cart, page-view,
//! login... events with ids, hex and base64 tokens, prices, a user agent),
//! keyed by one of ten million user ids, filled into one batch up to 256 KiB
//! of records (the native producer's default `batch_size`). It compresses
//! about 3.4× under zstd level 1 or 3 (libzstd). The generator is seeded
//! and deterministic: the same bytes on every machine and run.
//!
//! Run: `cargo bench -p clink-kafka-wire --bench codecs` prints, per codec,
//! the compression ratio and CPU and wall ns per record of compressing and
//! of inflating as the consumer does (median of `CODECS_ROUNDS` rounds,
//! default 7, each `CODECS_ITERATIONS` batches, default 20).
//! `CODECS_BATCH_RECORDS=N` makes the batch N records instead of 256 KiB.
//!
//! Instruction counts, which repeat run to run on a noisy machine:
//! `CODECS_CALLGRIND=CODEC[/ITERATIONS]` runs only that codec's compression
//! (`CODEC-decode`: its inflation), ITERATIONS times (default 10), inside `callgrind_measure`; run it under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*callgrind_measure*'`
//! and divide the total Ir by ITERATIONS × records. `benches/codecs_callgrind`
//! does all of it.
//!
//! `CODECS_DUMP=FILE` writes the uncompressed records section to FILE and
//! prints the record count, so that another implementation (benches/codecs-go,
//! franz-go's codecs) compresses exactly the same bytes; it also writes
//! `FILE.gzip`, `FILE.snappy`, `FILE.lz4` and `FILE.zstd`, our compressed
//! output, for other decoders to read back.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use clink_kafka_wire::compression::{self, Compression};
use clink_kafka_wire::record::{BatchMeta, RecordBatchEncoder, RecordOut, BATCH_HEADER_LEN, INFLATE_CHUNK};

/// The producer's default `batch_size`: records are added while the batch
/// holds less.
const BATCH_BYTES: usize = 256 * 1024;
const SEED: u64 = 42;
const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// xorshift64*: small, seeded, the same everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }

    /// `n` random lowercase hex digits.
    fn hex(&mut self, out: &mut String, n: usize) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut r = self.next();
        for i in 0..n {
            if i % 16 == 15 {
                r = self.next();
            }
            out.push(char::from(DIGITS[(r & 15) as usize]));
            r >>= 4;
        }
    }

    /// `n` random base64url characters.
    fn b64(&mut self, out: &mut String, n: usize) {
        const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut r = self.next();
        for i in 0..n {
            if i % 10 == 9 {
                r = self.next();
            }
            out.push(char::from(DIGITS[(r & 63) as usize]));
            r >>= 6;
        }
    }
}

const TYPES: &[&str] = &[
    "page_view",
    "add_to_cart",
    "remove_from_cart",
    "checkout_started",
    "order_placed",
    "payment_authorized",
    "search",
    "login",
    "logout",
    "product_view",
    "review_posted",
    "wishlist_add",
];
const COUNTRIES: &[&str] = &[
    "DE", "FR", "US", "GB", "NL", "SE", "PL", "ES", "IT", "BR", "IN", "JP", "CA", "AU", "CH", "AT", "BE", "DK", "NO",
    "FI", "IE", "PT", "CZ", "MX", "AR", "ZA", "KR", "SG", "NZ", "TR",
];
const PLANS: &[&str] = &["free", "basic", "pro", "enterprise"];
const CATEGORIES: &[&str] = &[
    "shoes",
    "books",
    "garden",
    "kitchen",
    "toys",
    "electronics",
    "music",
    "sports",
    "beauty",
    "office",
    "outdoor",
    "pets",
];
const AGENTS: &[&str] = &[
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
    "okhttp/4.12.0",
];
const WORDS: &[&str] = &[
    "red",
    "blue",
    "green",
    "black",
    "white",
    "classic",
    "organic",
    "wireless",
    "compact",
    "deluxe",
    "premium",
    "vintage",
    "smart",
    "ultra",
    "mini",
    "pro",
    "lite",
    "eco",
    "steel",
    "wooden",
    "leather",
    "cotton",
    "travel",
    "family",
    "edition",
    "bundle",
    "pack",
    "set",
    "kit",
    "lamp",
    "chair",
    "mug",
    "kettle",
    "backpack",
    "jacket",
    "speaker",
    "headphones",
    "notebook",
    "pen",
    "bottle",
];
const REFERRERS: &[&str] = &[
    "https://www.google.com/",
    "https://www.bing.com/",
    "https://duckduckgo.com/",
    "https://news.ycombinator.com/",
    "https://t.co/",
    "",
    "https://www.facebook.com/",
    "https://mail.example.com/",
];

/// Event `i` of the stream: (key, value).
fn event(rng: &mut Rng, i: u64) -> (Vec<u8>, Vec<u8>) {
    use std::fmt::Write;
    let key = format!("user-{:07}", rng.below(10_000_000));
    let mut v = String::with_capacity(1024);
    v.push_str("{\"event_id\":\"");
    rng.hex(&mut v, 32);
    let ts = 1_767_225_600_000u64 + i * 13 + rng.below(1000);
    let (ty, country, plan, age) = (
        rng.pick(TYPES),
        rng.pick(COUNTRIES),
        rng.pick(PLANS),
        18 + rng.below(60),
    );
    write!(
        v,
        "\",\"ts\":{ts},\"type\":\"{ty}\",\"user\":{{\"id\":\"{key}\",\"country\":\"{country}\",\"plan\":\"{plan}\",\"age\":{age}}},\"session\":\""
    )
    .unwrap();
    rng.hex(&mut v, 16);
    if matches!(ty, "login" | "logout" | "search") {
        // The small events.
        v.push_str("\",\"sig\":\"");
        rng.b64(&mut v, 43);
        write!(v, "\",\"event\":\"{ty}\",\"ok\":{}}}", rng.below(8) != 0).unwrap();
        return (key.into_bytes(), v.into_bytes());
    }
    let (lat, lat_frac, lon, lon_frac) = (
        rng.below(90),
        rng.below(1_000_000),
        rng.below(180),
        rng.below(1_000_000),
    );
    let latency = rng.below(5000);
    let (category, word, product) = (rng.pick(CATEGORIES), rng.pick(WORDS), rng.below(1_000_000));
    let (referrer, agent) = (rng.pick(REFERRERS), rng.pick(AGENTS));
    let ip = [rng.below(256), rng.below(256), rng.below(256), rng.below(256)];
    write!(
        v,
        "\",\"geo\":{{\"lat\":{lat}.{lat_frac:06},\"lon\":{lon}.{lon_frac:06}}},\"latency_ms\":{latency},\
         \"page\":\"/{category}/{word}-{product}\",\"referrer\":\"{referrer}\",\"ua\":\"{agent}\",\
         \"ip\":\"{}.{}.{}.{}\",\"items\":[",
        ip[0], ip[1], ip[2], ip[3]
    )
    .unwrap();
    let mut total = 0u64;
    for k in 0..rng.below(5) {
        if k > 0 {
            v.push(',');
        }
        let cents = 99 + rng.below(50_000);
        let qty = 1 + rng.below(4);
        total += cents * qty;
        let (sku, w1, w2, w3) = (
            rng.below(100_000_000),
            rng.pick(WORDS),
            rng.pick(WORDS),
            rng.pick(WORDS),
        );
        write!(
            v,
            "{{\"sku\":\"SKU-{sku:08}\",\"name\":\"{w1} {w2} {w3}\",\"qty\":{qty},\"price\":{}.{:02},\"currency\":\"EUR\"}}",
            cents / 100,
            cents % 100
        )
        .unwrap();
    }
    v.push_str("],\"device_id\":\"");
    rng.hex(&mut v, 32);
    v.push_str("\",\"sig\":\"");
    rng.b64(&mut v, 43);
    let (consent, ab) = (
        rng.below(2) == 0,
        ["control", "variant_a", "variant_b"][rng.below(3) as usize],
    );
    write!(
        v,
        "\",\"total\":{}.{:02},\"consent\":{consent},\"ab\":\"{ab}\"}}",
        total / 100,
        total % 100
    )
    .unwrap();
    (key.into_bytes(), v.into_bytes())
}

/// The uncompressed records section of one batch of events, and the number
/// of records in it: up to `BATCH_BYTES`, or `CODECS_BATCH_RECORDS` records
/// (a small batch, as a low-rate producer sends them).
fn records_section() -> (Vec<u8>, usize) {
    let mut rng = Rng::new(SEED);
    let mut events = Vec::new();
    let mut size = 0;
    let max_records = env_or("CODECS_BATCH_RECORDS", u64::MAX);
    while size < BATCH_BYTES && (events.len() as u64) < max_records {
        let (k, v) = event(&mut rng, events.len() as u64);
        size += k.len() + v.len() + 8; // about what the record adds
        events.push((k, v));
    }
    let records: Vec<RecordOut<'_>> = events
        .iter()
        .enumerate()
        .map(|(i, (k, v))| RecordOut {
            timestamp: 1_767_225_600_000 + 13 * i as i64,
            key: Some(k),
            value: Some(v),
            headers: &[],
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::new()
        .encode(&mut out, &BatchMeta::default(), &records)
        .unwrap();
    (out[BATCH_HEADER_LEN..].to_vec(), records.len())
}

/// Runs `op` `iterations` times. The only code callgrind counts in
/// `CODECS_CALLGRIND` mode (`--toggle-collect='*callgrind_measure*'`).
#[inline(never)]
fn callgrind_measure(iterations: u64, op: &mut dyn FnMut() -> usize) -> usize {
    let mut sum = 0;
    for _ in 0..iterations {
        sum += black_box(op());
    }
    sum
}

fn compress(codec: Compression, input: &[u8], out: &mut Vec<u8>) -> usize {
    out.clear();
    compression::compress(codec, black_box(input), out).unwrap();
    out.len()
}

/// Inflates `compressed` as a consumer does (`Inflater`, chunk after chunk
/// of `INFLATE_CHUNK`, each dropped once read); the bytes inflated.
fn inflate(codec: Compression, compressed: &bytes::Bytes, chunk: &mut Vec<u8>, max_unit: usize) -> usize {
    let mut inflater = compression::Inflater::new(codec, black_box(compressed.clone()), max_unit).unwrap();
    let mut total = 0;
    loop {
        chunk.clear();
        let more = inflater.fill(chunk, INFLATE_CHUNK, INFLATE_CHUNK + max_unit).unwrap();
        total += chunk.len();
        if !more {
            return total;
        }
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| {
        v.parse().unwrap_or_else(|_| panic!("{name}: an integer, got {v:?}"))
    })
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let (section, records) = records_section();
    let mut out = Vec::with_capacity(2 * section.len());
    if let Ok(path) = std::env::var("CODECS_DUMP") {
        std::fs::write(&path, &section).unwrap();
        // And what each codec makes of it, for other decoders to check
        // (`zstd -d`, `gzip -d`, `lz4 -d`).
        for codec in CODECS {
            compress(codec, &section, &mut out);
            std::fs::write(format!("{path}.{codec}"), &out).unwrap();
        }
        println!("{records}");
        return;
    }
    if let Ok(selector) = std::env::var("CODECS_CALLGRIND") {
        // CODEC[/ITERATIONS] compresses; CODEC-decode[/ITERATIONS] inflates.
        let (name, iterations) = selector.split_once('/').unwrap_or((&selector, "10"));
        let (name, decode) = name.strip_suffix("-decode").map_or((name, false), |n| (n, true));
        let codec: Compression = name.parse().unwrap();
        let iterations: u64 = iterations.parse().expect("ITERATIONS: an integer");
        compress(codec, &section, &mut out); // buffers grown before counting
        let sum = if decode {
            let compressed = bytes::Bytes::from(out.clone());
            let mut chunk = Vec::new();
            inflate(codec, &compressed, &mut chunk, section.len());
            callgrind_measure(iterations, &mut || {
                inflate(codec, &compressed, &mut chunk, section.len())
            })
        } else {
            callgrind_measure(iterations, &mut || compress(codec, &section, &mut out))
        };
        println!("{selector}: {iterations} iterations of {records} records (checksum {sum})");
        return;
    }
    let rounds = env_or("CODECS_ROUNDS", 7);
    let iterations = env_or("CODECS_ITERATIONS", 20);
    println!(
        "{records} records, {} B of records section, seed {SEED}; median of {rounds} rounds of {iterations} batches",
        section.len()
    );
    println!("| codec | ratio | CPU ns/record | wall ns/record | decode CPU ns/record | decode wall ns/record |");
    println!("|---|---|---|---|---|---|");
    for codec in CODECS {
        let n = compress(codec, &section, &mut out);
        let back = compression::decompress(codec, &out, section.len()).unwrap();
        assert!(back == section, "{codec} does not round-trip");
        let (mut cpu, mut wall): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (c0, w0) = (cpu_time::ProcessTime::now(), Instant::now());
            for _ in 0..iterations {
                compress(codec, &section, &mut out);
            }
            cpu.push(c0.elapsed());
            wall.push(w0.elapsed());
        }
        let compressed = bytes::Bytes::from(out[..n].to_vec());
        let mut chunk = Vec::new();
        assert_eq!(inflate(codec, &compressed, &mut chunk, section.len()), section.len());
        let (mut dcpu, mut dwall): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (c0, w0) = (cpu_time::ProcessTime::now(), Instant::now());
            for _ in 0..iterations {
                inflate(codec, &compressed, &mut chunk, section.len());
            }
            dcpu.push(c0.elapsed());
            dwall.push(w0.elapsed());
        }
        for v in [&mut cpu, &mut wall, &mut dcpu, &mut dwall] {
            v.sort();
        }
        let per = |d: Duration| d.as_nanos() as f64 / (iterations as f64 * records as f64);
        let median = |v: &[Duration]| per(v[v.len() / 2]);
        println!(
            "| {codec} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} |",
            section.len() as f64 / n as f64,
            median(&cpu),
            median(&wall),
            median(&dcpu),
            median(&dwall)
        );
    }
}
