// Writes transactions with the Java client, for tests/read_committed.rs.
//
// java -cp '<kafka-clients and deps>/*' TxnProducer.java BROKERS TOPIC
//
// On partition 0 of TOPIC, in order:
//   committed transaction: keys c0..c4
//   aborted transaction:   keys a0..a4
//   committed transaction: keys c5..c9
//   open transaction:      keys o0..o4, flushed; prints "OPEN" and waits for
//                          a line on stdin, then commits it and prints "DONE".
// Values equal keys. Any failure exits non-zero.
//
// java -cp ... TxnProducer.java BROKERS TOPIC open-and-halt TRANSACTIONAL_ID N [TIMEOUT_MS]
//
// Opens one transaction, sends N records (values f0..f<N-1>, unkeyed, to
// partition 0), flushes, prints "OPEN" and halts the JVM at once: no
// commit, no abort, no close. The transaction stays open at the broker (a
// foreign orphan for the resolver tests).
import java.util.Properties;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnProducer {
    public static void main(String[] args) throws Exception {
        if (args.length >= 5 && args[2].equals("open-and-halt")) {
            openAndHalt(args[0], args[1], args[3], Integer.parseInt(args[4]),
                args.length >= 6 ? args[5] : "60000");
            return;
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("transactional.id", "clink-test-" + args[1]);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        String topic = args[1];
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            send(producer, topic, "c", 0, 5);
            producer.commitTransaction();
            send(producer, topic, "a", 0, 5);
            producer.abortTransaction();
            send(producer, topic, "c", 5, 10);
            producer.commitTransaction();
            send(producer, topic, "o", 0, 5);
            producer.flush();
            System.out.println("OPEN");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in)).readLine();
            producer.commitTransaction();
            System.out.println("DONE");
            System.out.flush();
        }
    }

    static void openAndHalt(String brokers, String topic, String txnId, int n, String timeoutMs) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", brokers);
        p.put("transactional.id", txnId);
        p.put("transaction.timeout.ms", timeoutMs);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        producer.beginTransaction();
        for (int i = 0; i < n; i++) {
            String v = "f" + i;
            producer.send(new ProducerRecord<>(topic, 0, null, v));
        }
        producer.flush();
        System.out.println("OPEN");
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }

    static void send(KafkaProducer<String, String> producer, String topic, String prefix, int from, int to) throws Exception {
        producer.beginTransaction();
        for (int i = from; i < to; i++) {
            String k = prefix + i;
            producer.send(new ProducerRecord<>(topic, 0, k, k)).get();
        }
    }
}
