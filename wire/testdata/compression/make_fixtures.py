#!/usr/bin/env python3
"""Regenerate the known-answer fixtures for wire/src/compression.rs.

The fixtures are produced by implementations independent of the Rust code
under test:

* gzip: CPython's stdlib `gzip` module (zlib).
* zstd: the `zstandard` package (python-zstandard, bindings to the reference
  C libzstd).
* lz4:  the `lz4` package (python-lz4, bindings to the reference C liblz4).
* snappy: the `python-snappy` package (0.7.x is backed by `cramjam`, which
  itself wraps the Rust `snap` crate -- so the raw snappy fixtures are NOT
  independent of our snappy dependency; the xerial framing around them is
  written by this script from the snappy-java format description).

Requirements (only for regenerating): pip install --user lz4 zstandard python-snappy

The decoded contents must match the generators in the Rust tests:
  hello      = b"Hello, Kafka!\n"
  patterned  = lines "record-{i:06d} value={(i * 2654435761) % 1000003}\n"
               concatenated until >= 100 KiB, then truncated to 102400 bytes.
"""

import gzip
import io
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

HELLO = b"Hello, Kafka!\n"


def patterned() -> bytes:
    out = []
    size = 0
    i = 0
    while size < 100 * 1024:
        line = f"record-{i:06d} value={(i * 2654435761) % 1000003}\n".encode()
        out.append(line)
        size += len(line)
        i += 1
    return b"".join(out)[: 100 * 1024]


def write(name: str, data: bytes) -> None:
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes")


def xerial(raw_blocks) -> bytes:
    # snappy-java SnappyOutputStream: magic, version 1, min compatible 1,
    # then (i32 BE length, raw snappy block)*
    out = bytearray(b"\x82SNAPPY\x00")
    out += struct.pack(">ii", 1, 1)
    for block in raw_blocks:
        out += struct.pack(">i", len(block))
        out += block
    return bytes(out)


def main() -> None:
    pat = patterned()

    # --- gzip (CPython stdlib / zlib) ---
    write("hello.txt.gz", gzip.compress(HELLO, mtime=0))
    write("patterned.gz", gzip.compress(pat, compresslevel=6, mtime=0))
    write(
        "multi-member.gz",
        gzip.compress(HELLO, mtime=0) + gzip.compress(pat, mtime=0),
    )

    # --- zstd (python-zstandard / libzstd) ---
    try:
        import zstandard

        write("hello.zst", zstandard.ZstdCompressor(level=3).compress(HELLO))
        write(
            "patterned.zst",
            zstandard.ZstdCompressor(level=3, write_checksum=True).compress(pat),
        )
        # Streaming without a pledged size: the frame carries a window
        # descriptor (level 19 => 8 MiB window) instead of a content size,
        # as zstd-jni's ZstdOutputStream (Kafka's producer) writes it.
        buf = io.BytesIO()
        cctx = zstandard.ZstdCompressor(level=19, write_content_size=False)
        with cctx.stream_writer(buf, closefd=False) as w:
            for i in range(0, len(pat), 10000):
                w.write(pat[i : i + 10000])
        write("patterned-stream-l19.zst", buf.getvalue())
    except ImportError:
        print("zstandard not installed: skipping zstd fixtures")

    # --- lz4 frame (python-lz4 / liblz4) ---
    try:
        import lz4.frame as lz4f

        # As Kafka's KafkaLZ4BlockOutputStream: 64 KiB independent blocks.
        write(
            "hello.lz4",
            lz4f.compress(
                HELLO,
                block_size=lz4f.BLOCKSIZE_MAX64KB,
                block_linked=False,
                store_size=False,
            ),
        )
        write(
            "patterned.lz4",
            lz4f.compress(
                pat,
                block_size=lz4f.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=True,
                store_size=False,
            ),
        )
        # librdkafka-ish / lz4 CLI style: linked blocks, content size,
        # block checksums; exercises the rest of the frame format.
        write(
            "patterned-linked.lz4",
            lz4f.compress(
                pat,
                block_size=lz4f.BLOCKSIZE_MAX64KB,
                block_linked=True,
                content_checksum=True,
                block_checksum=True,
                store_size=True,
            ),
        )
    except ImportError:
        print("lz4 not installed: skipping lz4 fixtures")

    # --- snappy (python-snappy / cramjam) ---
    try:
        import snappy

        write("hello.snappy.raw", snappy.compress(HELLO))
        write("patterned.snappy.raw", snappy.compress(pat))
        blocks = [snappy.compress(pat[i : i + 32 * 1024]) for i in range(0, len(pat), 32 * 1024)]
        write("patterned.snappy.xerial", xerial(blocks))
    except ImportError:
        print("python-snappy not installed: skipping snappy fixtures")


if __name__ == "__main__":
    main()
