// The Java client of benches/groups/run: Kafka's own KafkaConsumer consuming
// one topic as a group member (subscribe) or with manual assignment (assign),
// with the same settings and output as the franz-go client's group mode
// (benches/clients/franz: consume -group).
//
// javac -cp '<kafka-clients and deps>/*' -d DIR JavaGroupConsumer.java
// java -cp 'DIR:<kafka-clients and deps>/*' JavaGroupConsumer --brokers B --topic T
//     [--group G [--group-protocol classic|consumer] [--remote-assignor uniform|range]
//      [--session-timeout-ms N] [--instance-id ID]]
//     [--count N] [--format dots|lines] [--idle-timeout-ms N]
//
// Without --group: assign() every partition of T and seek to the beginning.
// With --group: subscribe() to T, auto.offset.reset=earliest, auto-commit
// (Java's default, 5 s), the Java default assignors (classic: range, then
// cooperative-sticky), heartbeat.interval.ms 3000.
// Each record prints '.' (dots) or "PARTITION OFFSET\n" (lines); lines, and
// any output with a group, are flushed after every poll so the harness sees
// when a record arrived. --count 0 (group only) consumes until SIGTERM/SIGINT: the
// consumer is woken up and closed (commit, LeaveGroup unless static).
// Exits non-zero on any error, or when --count N is not met exactly.
import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JavaGroupConsumer {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                die("unexpected argument " + argv[i]);
            }
            a.put(argv[i].substring(2), argv[i + 1]);
        }
        String topic = a.get("topic");
        if (topic == null) {
            die("--topic is required");
        }
        String group = a.get("group");
        long count = Long.parseLong(a.getOrDefault("count", "0"));
        if (count < 0 || (count == 0 && group == null)) {
            die("--count must be at least 1 (0 only with --group)");
        }
        boolean lines = a.getOrDefault("format", "dots").equals("lines");
        long idleMs = Long.parseLong(a.getOrDefault("idle-timeout-ms", "30000"));

        Properties p = new Properties();
        p.put("bootstrap.servers", a.getOrDefault("brokers", "127.0.0.1:19092"));
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        if (group != null) {
            p.put("group.id", group);
            String protocol = a.getOrDefault("group-protocol", "classic");
            p.put("group.protocol", protocol);
            if (protocol.equals("classic")) {
                p.put("session.timeout.ms", a.getOrDefault("session-timeout-ms", "45000"));
                p.put("heartbeat.interval.ms", "3000");
            } else if (a.containsKey("remote-assignor")) {
                p.put("group.remote.assignor", a.get("remote-assignor"));
            }
            if (a.containsKey("instance-id")) {
                p.put("group.instance.id", a.get("instance-id"));
            }
        }

        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
        CountDownLatch closed = new CountDownLatch(1);
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            consumer.wakeup();
            try {
                closed.await();
            } catch (InterruptedException e) {
                // exiting anyway
            }
        }));
        BufferedOutputStream out = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 64 * 1024);
        long got = 0;
        int status = 0;
        try {
            if (group != null) {
                consumer.subscribe(List.of(topic));
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (PartitionInfo pi : consumer.partitionsFor(topic)) {
                    tps.add(new TopicPartition(topic, pi.partition()));
                }
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
            }
            long lastRecord = System.nanoTime();
            while (count == 0 || got < count) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    if (idleMs > 0 && System.nanoTime() - lastRecord > idleMs * 1_000_000L) {
                        System.err.println("no record for " + idleMs + " ms after " + got + " records");
                        status = 1;
                        break;
                    }
                    continue;
                }
                lastRecord = System.nanoTime();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    got++;
                    if (lines) {
                        out.write((r.partition() + " " + r.offset() + "\n").getBytes());
                    } else {
                        out.write('.');
                    }
                }
                if (group != null || lines) {
                    out.flush();
                }
            }
        } catch (WakeupException e) {
            // SIGTERM/SIGINT: close below
        } finally {
            out.flush();
            consumer.close();
            closed.countDown();
        }
        if (count > 0 && got != count) {
            System.err.println("consumed " + got + " records, expected exactly " + count);
            status = 1;
        }
        if (status != 0) {
            Runtime.getRuntime().halt(status);
        }
    }

    static void die(String msg) {
        System.err.println("JavaGroupConsumer: " + msg);
        System.exit(2);
    }
}
