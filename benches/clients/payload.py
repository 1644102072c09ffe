#!/usr/bin/env python3
"""The realistic payload of benches/clients/run (issue 23): seeded, JSON-like
click-stream events of about 200-1,000 bytes, keyed by a user id of high
cardinality (one of 10 million), compressing about 3x under zstd.

Deterministic: the same seed and count give the same bytes on every machine
(Python's `random.Random` is specified to be reproducible for a given seed).
Only this generator is committed, not its output: the harness writes the file
at the start of a run, to tmpfs, and every client reads it.

    benches/clients/payload.py --seed 1 --count 100000 OUT     # KEY<TAB>VALUE lines
    benches/clients/payload.py --seed 1 --count 100000 --values-only OUT

Each line is `KEY<TAB>VALUE`: neither holds a tab or a newline. Python 3
standard library only.
"""

import argparse
import random

EVENT_TYPES = ("page_view", "click", "add_to_cart", "remove_from_cart", "search", "checkout", "purchase", "login")
PAGES = ("/", "/search", "/cart", "/checkout", "/account", "/products", "/categories", "/deals", "/help")
OSES = (("android", ("12", "13", "14")), ("ios", ("16.6", "17.2", "17.4")), ("windows", ("10", "11")),
        ("macos", ("13.6", "14.3")), ("linux", ("6.1", "6.6")))
BROWSERS = ("chrome", "firefox", "safari", "edge", "samsung")
COUNTRIES = (("DE", ("Berlin", "Hamburg", "Munich")), ("FR", ("Paris", "Lyon")), ("US", ("New York", "Austin", "Seattle")),
             ("GB", ("London", "Leeds")), ("BR", ("Sao Paulo", "Recife")), ("IN", ("Pune", "Delhi")),
             ("JP", ("Tokyo", "Osaka")))
CURRENCIES = ("EUR", "USD", "GBP", "BRL", "INR", "JPY")
WORDS = ("red", "blue", "shoe", "jacket", "wireless", "headphones", "organic", "coffee", "lamp", "desk", "chair",
         "garden", "hose", "kids", "toy", "book", "phone", "case", "cable", "usb", "charger", "winter", "boots",
         "running", "yoga", "mat", "kitchen", "knife", "set", "water", "bottle", "leather", "wallet", "smart",
         "watch", "band", "camera", "lens", "tripod", "gift", "card", "sale", "new", "bestseller", "eco")
HEX = "0123456789abcdef"
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _hex(rng, n):
    return "".join(rng.choice(HEX) for _ in range(n))


def _b64(rng, n):
    return "".join(rng.choice(B64) for _ in range(n))


def _page(rng):
    page = rng.choice(PAGES)
    if page != "/" and rng.random() < 0.6:
        page += "/" + str(rng.randrange(100_000))
    return page


def _str(s):
    # The generator only emits characters that need no escaping.
    return '"' + s + '"'


def event(rng, seq):
    """One (key, value) pair of bytes."""
    user = rng.randrange(10_000_000)
    etype = rng.choice(EVENT_TYPES)
    os_name, versions = rng.choice(OSES)
    country, cities = rng.choice(COUNTRIES)
    ts = 1_764_979_200_000 + seq * 7 + rng.randrange(7)
    fields = [
        ("event_id", _str(f"{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}")),
        ("type", _str(etype)),
        ("ts", str(ts)),
        ("user_id", _str(f"u{user:07d}")),
        ("session_id", _str(_b64(rng, 22))),
        ("trace_id", _str(_b64(rng, 32))),
        ("ip", _str(".".join(str(rng.randrange(256)) for _ in range(4)))),
        ("page", _str(_page(rng))),
    ]
    if rng.random() < 0.6:
        fields.append(("device", "{" + ",".join((
            f'"os":{_str(os_name)}', f'"os_version":{_str(rng.choice(versions))}',
            f'"browser":{_str(rng.choice(BROWSERS))}')) + "}"))
    if rng.random() < 0.7:
        fields.append(("geo", "{" + ",".join((
            f'"country":{_str(country)}', f'"city":{_str(rng.choice(cities))}',
            f'"lat":{rng.uniform(-60, 70):.4f}', f'"lon":{rng.uniform(-170, 170):.4f}')) + "}"))
    if etype == "search" or rng.random() < 0.3:
        fields.append(("query", _str(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))))))
    items = rng.choice((0, 0, 1, 1, 2, 3, 4, 6)) if etype not in ("login", "page_view") else rng.choice((0, 1))
    if items:
        rows = []
        for _ in range(items):
            rows.append("{" + ",".join((
                f'"sku":{_str("SKU-" + str(rng.randrange(1_000_000)).zfill(6))}',
                f'"name":{_str(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 4))))}',
                f'"qty":{rng.randint(1, 4)}',
                f'"price":{rng.randrange(99, 99_999) / 100:.2f}',
            )) + "}")
        fields.append(("items", "[" + ",".join(rows) + "]"))
        fields.append(("currency", _str(rng.choice(CURRENCIES))))
    fields.append(("ab_bucket", str(rng.randrange(16))))
    fields.append(("consent", "true" if rng.random() < 0.8 else "false"))
    value = "{" + ",".join(f'"{k}":{v}' for k, v in fields) + "}"
    return f"user-{user}".encode(), value.encode()


def generate(seed, count):
    """Yields `count` (key, value) pairs for `seed`."""
    rng = random.Random(seed)
    for seq in range(count):
        yield event(rng, seq)


def write(path, seed, count, values_only=False):
    """Writes the file; returns (key bytes, value bytes) summed over the records."""
    kb = vb = 0
    with open(path, "wb") as f:
        buf = []
        for k, v in generate(seed, count):
            kb += len(k)
            vb += len(v)
            buf.append(v + b"\n" if values_only else k + b"\t" + v + b"\n")
            if len(buf) >= 4096:
                f.write(b"".join(buf))
                buf.clear()
        f.write(b"".join(buf))
    return kb, vb


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--values-only", action="store_true", help="one VALUE per line, no key (ProducerPerformance)")
    ap.add_argument("out")
    args = ap.parse_args()
    kb, vb = write(args.out, args.seed, args.count, args.values_only)
    print(f"{args.count} records, {kb + vb} bytes of keys and values, {vb / max(1, args.count):.0f} B per value")


if __name__ == "__main__":
    main()
