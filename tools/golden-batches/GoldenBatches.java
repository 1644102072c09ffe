// Golden Kafka record batches (magic v2) written and read by Apache Kafka's own
// Java client code (kafka-clients 4.4.0). Single-file program, run in
// source-launch mode (no compile step):
//
//   java -cp 'lib/*' GoldenBatches.java generate <outdir>
//   java -cp 'lib/*' GoldenBatches.java dump <file.bin>
//   java -cp 'lib/*' GoldenBatches.java verify <dir>
//
// See README.md for the canonical dump format.
//
// NOTE: kafka-clients 4.4 moved the record classes to
// org.apache.kafka.common.record.internal (4.3.x and earlier:
// org.apache.kafka.common.record). TimestampType stayed in
// org.apache.kafka.common.record.

import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.DefaultRecordBatch;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;

public class GoldenBatches {

    // ---------------------------------------------------------------- data

    /** One input record: offset is assigned sequentially by the builder. */
    static final class Rec {
        final long timestamp;
        final byte[] key;   // null = null key
        final byte[] value; // null = tombstone
        final Header[] headers;

        Rec(long timestamp, byte[] key, byte[] value, Header... headers) {
            this.timestamp = timestamp;
            this.key = key;
            this.value = value;
            this.headers = headers;
        }
    }

    static final long BASE_TS = 1_700_000_000_000L; // 2023-11-14T22:13:20Z

    static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Deterministic 10-byte key, e.g. "key-000042". */
    static byte[] key10(int i) {
        return ascii(String.format("key-%06d", i));
    }

    /** Deterministic filler of exactly n bytes; byte pattern depends on seed. */
    static byte[] filler(int seed, int n) {
        byte[] b = new byte[n];
        for (int j = 0; j < n; j++) {
            b[j] = (byte) ((seed * 131 + j * 7 + (j >>> 5) * 3) & 0xff);
        }
        return b;
    }

    /**
     * Deterministic, compressible-but-not-trivial large value of exactly n bytes:
     * repeated "<8-digit counter>:golden-large-value-<seed>;" text.
     */
    static byte[] largeValue(int seed, int n) {
        StringBuilder sb = new StringBuilder(n + 64);
        int k = 0;
        while (sb.length() < n) {
            sb.append(String.format("%08d:golden-large-value-%d;", k++, seed));
        }
        byte[] all = ascii(sb.toString());
        byte[] b = new byte[n];
        System.arraycopy(all, 0, b, 0, n);
        return b;
    }

    static Header h(String k, byte[] v) {
        return new RecordHeader(k, v);
    }

    /**
     * The ~50-record set used for each codec. Strictly increasing, non-uniform
     * CREATE_TIME timestamps (including a delta > 2^14 and one > 2^31 ms so the
     * varlong timestamp deltas need several bytes). Two large values (40 KiB and
     * 20 KiB) make the uncompressed records section > 64 KiB, so snappy-java
     * (32 KiB blocks) and Kafka's LZ4 framing (64 KiB blocks) both emit more than
     * one block.
     */
    static List<Rec> codecRecords() {
        List<Rec> rs = new ArrayList<>();
        long ts = BASE_TS;
        final int n = 50;
        for (int i = 0; i < n; i++) {
            // non-uniform increasing deltas
            long delta;
            if (i == 0) delta = 0;
            else if (i == 17) delta = 20_000;            // > 2^14
            else if (i == 33) delta = 3_000_000_000L;    // > 2^31
            else delta = 1 + ((i * 37L) % 13) * ((i % 4) + 1);
            ts += delta;

            byte[] key;
            byte[] value;
            Header[] headers;
            switch (i) {
                case 0:
                    key = key10(i); value = filler(i, 100); headers = new Header[0];
                    break;
                case 1: // 0-byte key and 0-byte value (not null)
                    key = new byte[0]; value = new byte[0]; headers = new Header[0];
                    break;
                case 2: // null key
                    key = null; value = filler(i, 100); headers = new Header[0];
                    break;
                case 3: // tombstone (null value)
                    key = key10(i); value = null; headers = new Header[0];
                    break;
                case 4: // 1 header
                    key = key10(i); value = filler(i, 100);
                    headers = new Header[] { h("trace-id", filler(99, 16)) };
                    break;
                case 5: // 3 headers, one with a null value, one with an empty value
                    key = key10(i); value = filler(i, 100);
                    headers = new Header[] {
                        h("h1", ascii("v1")),
                        h("nullhdr", null),
                        h("empty", new byte[0]),
                    };
                    break;
                case 6: // 40 KiB value
                    key = key10(i); value = largeValue(i, 40 * 1024); headers = new Header[0];
                    break;
                case 7: // null key AND null value, 1 header
                    key = null; value = null;
                    headers = new Header[] { h("only-header", ascii("x")) };
                    break;
                case 8: // non-ASCII (multi-byte UTF-8) header key, empty header key
                    key = key10(i); value = filler(i, 10);
                    headers = new Header[] {
                        h("cl\u00e9-\u00fc\u65e5", ascii("utf8")),
                        h("", ascii("empty-key")),
                        h("dup", ascii("1")),
                    };
                    break;
                case 30: // second large value (20 KiB) -> records section > 64 KiB
                    key = key10(i); value = largeValue(i, 20 * 1024);
                    headers = new Header[] { h("big", ascii("yes")) };
                    break;
                default: {
                    key = (i % 11 == 0) ? null : key10(i);
                    int vlen = (i % 9 == 0) ? 0 : (i * 29) % 200 + 1;
                    value = (i % 13 == 0) ? null : filler(i, vlen);
                    int nh = i % 3 == 0 ? 0 : (i % 3 == 1 ? 1 : 3);
                    headers = new Header[nh];
                    for (int hIdx = 0; hIdx < nh; hIdx++) {
                        byte[] hv = (nh == 3 && hIdx == 2) ? null : ascii("hv-" + i + "-" + hIdx);
                        headers[hIdx] = h("hk" + hIdx, hv);
                    }
                }
            }
            rs.add(new Rec(ts, key, value, headers));
        }
        return rs;
    }

    static List<Rec> simpleRecords(String prefix, int count, long baseTs) {
        List<Rec> rs = new ArrayList<>();
        long ts = baseTs;
        for (int i = 0; i < count; i++) {
            ts += 1 + (i * 5) % 7;
            Header[] hs = (i % 2 == 0) ? new Header[0] : new Header[] { h("i", ascii(Integer.toString(i))) };
            rs.add(new Rec(ts, ascii(prefix + "-k" + i), ascii(prefix + "-value-" + i), hs));
        }
        return rs;
    }

    // ------------------------------------------------------------- building

    static ByteBuffer build(Compression compression, long baseOffset, long producerId, short producerEpoch,
                            int baseSequence, boolean transactional, int partitionLeaderEpoch, List<Rec> recs) {
        ByteBuffer buf = ByteBuffer.allocate(1024); // builder grows it as needed
        MemoryRecordsBuilder b = MemoryRecords.builder(
            buf,
            RecordBatch.MAGIC_VALUE_V2,
            compression,
            TimestampType.CREATE_TIME,
            baseOffset,
            RecordBatch.NO_TIMESTAMP,   // logAppendTime (unused for CREATE_TIME)
            producerId,
            producerEpoch,
            baseSequence,
            transactional,
            false,                      // isControlBatch
            partitionLeaderEpoch);
        long off = baseOffset;
        for (Rec r : recs) {
            b.appendWithOffset(off++, r.timestamp, r.key, r.value, r.headers);
        }
        MemoryRecords mr = b.build();
        return mr.buffer();
    }

    static byte[] toBytes(ByteBuffer bb) {
        ByteBuffer d = bb.duplicate();
        byte[] out = new byte[d.remaining()];
        d.get(out);
        return out;
    }

    // -------------------------------------------------------------- dumping

    static final char[] HEX = "0123456789abcdef".toCharArray();

    static void hex(StringBuilder sb, byte[] b) {
        if (b == null) { sb.append("null"); return; }
        for (byte x : b) { sb.append(HEX[(x >> 4) & 0xf]).append(HEX[x & 0xf]); }
    }

    static void hex(StringBuilder sb, ByteBuffer bb) {
        if (bb == null) { sb.append("null"); return; }
        hex(sb, toBytes(bb));
    }

    static String tsType(TimestampType t) {
        switch (t) {
            case CREATE_TIME: return "create";
            case LOG_APPEND_TIME: return "log_append";
            default: return "none";
        }
    }

    /** Canonical dump of every batch in bytes. Throws on CRC / decode failure. */
    static String dump(byte[] bytes) {
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(bytes));
        StringBuilder sb = new StringBuilder();
        int consumed = 0;
        for (MutableRecordBatch batch : records.batches()) {
            batch.ensureValid(); // CRC-32C + size checks; throws CorruptRecordException
            if (batch.magic() != RecordBatch.MAGIC_VALUE_V2) {
                throw new IllegalStateException("not a v2 batch: magic=" + batch.magic());
            }
            consumed += batch.sizeInBytes();
            long baseTs = (batch instanceof DefaultRecordBatch)
                ? ((DefaultRecordBatch) batch).baseTimestamp()
                : RecordBatch.NO_TIMESTAMP;
            Integer count = batch.countOrNull();
            sb.append("batch base_offset=").append(batch.baseOffset())
              .append(" last_offset_delta=").append((int) (batch.lastOffset() - batch.baseOffset()))
              .append(" base_timestamp=").append(baseTs)
              .append(" max_timestamp=").append(batch.maxTimestamp())
              .append(" compression=").append(batch.compressionType().name)
              .append(" timestamp_type=").append(tsType(batch.timestampType()))
              .append(" transactional=").append(batch.isTransactional())
              .append(" control=").append(batch.isControlBatch())
              .append(" producer_id=").append(batch.producerId())
              .append(" producer_epoch=").append(batch.producerEpoch())
              .append(" base_sequence=").append(batch.baseSequence())
              .append(" partition_leader_epoch=").append(batch.partitionLeaderEpoch())
              .append(" records=").append(count == null ? "null" : count.toString())
              .append('\n');
            for (Record r : batch) { // decompresses if needed
                r.ensureValid();
                sb.append("record offset=").append(r.offset())
                  .append(" timestamp=").append(r.timestamp())
                  .append(" key=");
                hex(sb, r.hasKey() ? r.key() : null);
                sb.append(" value=");
                hex(sb, r.hasValue() ? r.value() : null);
                Header[] hs = r.headers();
                sb.append(" headers=").append(hs.length);
                for (Header hd : hs) {
                    sb.append(' ');
                    hex(sb, hd.key().getBytes(StandardCharsets.UTF_8));
                    sb.append(':');
                    hex(sb, hd.value());
                }
                sb.append('\n');
            }
        }
        if (consumed != bytes.length) {
            // readableRecords silently stops at a truncated trailing batch (that is
            // legal in a fetch response) -- for golden files we want to know.
            throw new IllegalStateException("trailing bytes: parsed " + consumed + " of " + bytes.length
                + " bytes as complete batches");
        }
        return sb.toString();
    }

    /** What the record lines of a dump must look like for the given input (self-check). */
    static String expectedRecordLines(long baseOffset, List<Rec> recs) {
        StringBuilder sb = new StringBuilder();
        long off = baseOffset;
        for (Rec r : recs) {
            sb.append("record offset=").append(off++).append(" timestamp=").append(r.timestamp).append(" key=");
            hex(sb, r.key);
            sb.append(" value=");
            hex(sb, r.value);
            sb.append(" headers=").append(r.headers.length);
            for (Header hd : r.headers) {
                sb.append(' ');
                hex(sb, hd.key().getBytes(StandardCharsets.UTF_8));
                sb.append(':');
                hex(sb, hd.value());
            }
            sb.append('\n');
        }
        return sb.toString();
    }

    static String recordLinesOnly(String dump) {
        return Stream.of(dump.split("\n", -1))
            .filter(l -> l.startsWith("record "))
            .map(l -> l + "\n")
            .collect(Collectors.joining());
    }

    // ------------------------------------------------------------- commands

    static void writeGolden(Path outDir, String name, ByteBuffer batchBytes, String expectRecordLines)
            throws IOException {
        byte[] bytes = toBytes(batchBytes);
        Path bin = outDir.resolve(name + ".bin");
        Files.write(bin, bytes);
        // Re-read the file from disk so the dump reflects what Kafka decodes.
        String d = dump(Files.readAllBytes(bin));
        if (expectRecordLines != null && !recordLinesOnly(d).equals(expectRecordLines)) {
            throw new IllegalStateException("self-check failed for " + name
                + ": decoded records differ from input");
        }
        Files.write(outDir.resolve(name + ".dump"), d.getBytes(StandardCharsets.UTF_8));
        System.out.println("wrote " + name + ".bin (" + bytes.length + " bytes) + " + name + ".dump");
    }

    static void generate(Path outDir) throws IOException {
        Files.createDirectories(outDir);
        final long noPid = RecordBatch.NO_PRODUCER_ID;
        final short noEpoch = RecordBatch.NO_PRODUCER_EPOCH;
        final int noSeq = RecordBatch.NO_SEQUENCE;
        final int noPle = RecordBatch.NO_PARTITION_LEADER_EPOCH;

        List<Rec> recs = codecRecords();
        String expect = expectedRecordLines(0, recs);
        Object[][] codecs = {
            { "none", Compression.NONE },
            { "gzip", Compression.gzip().build() },
            { "snappy", Compression.snappy().build() },
            { "lz4", Compression.lz4().build() },
            { "zstd", Compression.zstd().build() },
        };
        for (Object[] c : codecs) {
            writeGolden(outDir, (String) c[0],
                build((Compression) c[1], 0L, noPid, noEpoch, noSeq, false, noPle, recs), expect);
        }

        // Idempotent (not transactional), uncompressed.
        List<Rec> idem = simpleRecords("idem", 4, BASE_TS + 1_000_000);
        writeGolden(outDir, "idempotent",
            build(Compression.NONE, 0L, 4242L, (short) 7, 100, false, noPle, idem),
            expectedRecordLines(0, idem));

        // Transactional, lz4, 5 records.
        List<Rec> txn = simpleRecords("txn", 5, BASE_TS + 2_000_000);
        writeGolden(outDir, "transactional",
            build(Compression.lz4().build(), 0L, 4243L, (short) 3, 0, true, noPle, txn),
            expectedRecordLines(0, txn));

        // Control batches (end transaction markers) following the 5 txn records.
        // withEndTransactionMarker(initialOffset, timestamp, partitionLeaderEpoch, producerId, producerEpoch, marker)
        long markerTs = BASE_TS + 2_000_100;
        writeGolden(outDir, "control_commit",
            MemoryRecords.withEndTransactionMarker(5L, markerTs, noPle, 4243L, (short) 3,
                new EndTransactionMarker(ControlRecordType.COMMIT, 5)).buffer(), null);
        writeGolden(outDir, "control_abort",
            MemoryRecords.withEndTransactionMarker(5L, markerTs, noPle, 4243L, (short) 3,
                new EndTransactionMarker(ControlRecordType.ABORT, 5)).buffer(), null);

        // Two consecutive batches, base offsets 0 and 3, 3 records each, uncompressed,
        // concatenated the way a fetch response carries them. partition_leader_epoch=2
        // (as a broker would have stamped it).
        List<Rec> m1 = simpleRecords("m1", 3, BASE_TS + 3_000_000);
        List<Rec> m2 = simpleRecords("m2", 3, BASE_TS + 3_000_100);
        byte[] b1 = toBytes(build(Compression.NONE, 0L, noPid, noEpoch, noSeq, false, 2, m1));
        byte[] b2 = toBytes(build(Compression.NONE, 3L, noPid, noEpoch, noSeq, false, 2, m2));
        ByteBuffer multi = ByteBuffer.allocate(b1.length + b2.length);
        multi.put(b1).put(b2).flip();
        writeGolden(outDir, "multi", multi, expectedRecordLines(0, m1) + expectedRecordLines(3, m2));
    }

    static String shorten(String s) {
        return s.length() <= 160 ? s : s.substring(0, 160) + "...(" + s.length() + " chars)";
    }

    /** A short, readable description of the first difference between two dumps. */
    static String describeDiff(String expected, String actual) {
        String[] e = expected.split("\n", -1);
        String[] a = actual.split("\n", -1);
        int n = Math.max(e.length, a.length);
        for (int i = 0; i < n; i++) {
            String el = i < e.length ? e[i] : "<missing>";
            String al = i < a.length ? a[i] : "<missing>";
            if (!el.equals(al)) {
                String[] ef = el.split(" ");
                String[] af = al.split(" ");
                StringBuilder field = new StringBuilder();
                for (int f = 0; f < Math.max(ef.length, af.length); f++) {
                    String x = f < ef.length ? ef[f] : "<missing>";
                    String y = f < af.length ? af[f] : "<missing>";
                    if (!x.equals(y)) {
                        field.append("\n    first differing field #").append(f)
                             .append(":\n      expected: ").append(shorten(x))
                             .append("\n      actual:   ").append(shorten(y));
                        break;
                    }
                }
                return "  line " + (i + 1) + ":\n    expected: " + shorten(el) + "\n    actual:   " + shorten(al)
                    + field;
            }
        }
        return "  (no difference found)";
    }

    static int verify(Path dir) throws IOException {
        List<Path> bins;
        try (Stream<Path> s = Files.list(dir)) {
            bins = s.filter(p -> p.getFileName().toString().endsWith(".bin")).sorted().collect(Collectors.toList());
        }
        int cases = 0, failures = 0;
        for (Path bin : bins) {
            String file = bin.getFileName().toString();
            String name = file.substring(0, file.length() - ".bin".length());
            Path exp = dir.resolve(name + ".expected.dump");
            if (!Files.exists(exp)) continue;
            cases++;
            String expected = new String(Files.readAllBytes(exp), StandardCharsets.UTF_8);
            String actual;
            try {
                actual = dump(Files.readAllBytes(bin));
            } catch (Exception ex) {
                failures++;
                System.out.println("FAIL " + name + ": kafka could not read batch: " + ex);
                continue;
            }
            if (actual.equals(expected)) {
                System.out.println("ok " + name);
            } else {
                failures++;
                System.out.println("MISMATCH " + name + "\n" + describeDiff(expected, actual));
            }
        }
        if (cases == 0) {
            System.out.println("no <name>.bin with a sibling <name>.expected.dump in " + dir);
            return 1;
        }
        System.out.println(cases + " case(s), " + failures + " failure(s)");
        return failures == 0 ? 0 : 1;
    }

    static void usage() {
        System.err.println("usage: java -cp 'lib/*' GoldenBatches.java generate <outdir> | dump <file.bin> | verify <dir>");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) usage();
        switch (args[0]) {
            case "generate":
                generate(Paths.get(args[1]));
                break;
            case "dump": {
                String d;
                try {
                    d = dump(Files.readAllBytes(Paths.get(args[1])));
                } catch (Exception ex) {
                    System.out.println(ex.toString());
                    System.exit(1);
                    return;
                }
                PrintStream out = new PrintStream(System.out, false, "UTF-8");
                out.print(d);
                out.flush();
                break;
            }
            case "verify":
                System.exit(verify(Paths.get(args[1])));
                break;
            default:
                usage();
        }
    }
}
