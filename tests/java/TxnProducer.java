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
import java.util.Properties;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnProducer {
    public static void main(String[] args) throws Exception {
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

    static void send(KafkaProducer<String, String> producer, String topic, String prefix, int from, int to) throws Exception {
        producer.beginTransaction();
        for (int i = from; i < to; i++) {
            String k = prefix + i;
            producer.send(new ProducerRecord<>(topic, 0, k, k)).get();
        }
    }
}
