// Prints what kafka-clients 4.4.0 writes for the ConsumerProtocol vectors in
// wire/src/group/consumer_protocol.rs (java_written_bytes) and its range and
// roundrobin results for wire/src/group/tests.rs (three_members_*). Run:
//   CP=$(ls .kafka-local/tools-lib/*.jar | tr "\n" :); javac -cp "$CP" Check.java && java -cp "$CP:." Check
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.Node;
import java.nio.ByteBuffer;
import java.util.*;

public class Check {
    static String hex(ByteBuffer b) { StringBuilder s = new StringBuilder(); while (b.hasRemaining()) s.append(String.format("%02x", b.get())); return s.toString(); }
    public static void main(String[] a) throws Exception {
        Subscription sub = new Subscription(List.of("a", "bc"), ByteBuffer.wrap(new byte[]{0,0,0,7}), List.of(new TopicPartition("a", 0), new TopicPartition("a", 2)), 7, Optional.of("r1"));
        System.out.println("sub_v3 " + hex(ConsumerProtocol.serializeSubscription(sub)));
        Subscription sub0 = new Subscription(List.of("t"), null);
        System.out.println("sub_v0 " + hex(ConsumerProtocol.serializeSubscription(sub0, (short)0)));
        Assignment asg = new Assignment(List.of(new TopicPartition("a", 5)), null);
        System.out.println("asg_v3 " + hex(ConsumerProtocol.serializeAssignment(asg)));
        // Assignors on the 3-member example: t (6), u (3).
        List<PartitionInfo> parts = new ArrayList<>();
        for (int p = 0; p < 6; p++) parts.add(new PartitionInfo("t", p, Node.noNode(), new Node[0], new Node[0]));
        for (int p = 0; p < 3; p++) parts.add(new PartitionInfo("u", p, Node.noNode(), new Node[0], new Node[0]));
        Cluster cluster = new Cluster("c", List.of(), parts, Set.of(), Set.of());
        Map<String, Subscription> subs = new HashMap<>();
        for (String m : List.of("member-01", "member-02", "member-03")) subs.put(m, new Subscription(List.of("t", "u")));
        for (ConsumerPartitionAssignor as : List.of(new RangeAssignor(), new RoundRobinAssignor())) {
            GroupAssignment ga = as.assign(cluster, new GroupSubscription(subs));
            TreeMap<String, List<String>> out = new TreeMap<>();
            ga.groupAssignment().forEach((m, x) -> { List<String> l = new ArrayList<>(); for (TopicPartition tp : x.partitions()) l.add(tp.topic() + tp.partition()); Collections.sort(l); out.put(m, l); });
            System.out.println(as.name() + " " + out);
        }
    }
}
