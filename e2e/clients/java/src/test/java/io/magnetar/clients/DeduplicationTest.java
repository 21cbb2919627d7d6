package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Producer;
import org.junit.jupiter.api.Test;

class DeduplicationTest extends ClientTest {
    String namespace() throws Exception {
        String ns = "public/" + unique("ns");
        admin.namespaces().createNamespace(ns);
        return ns;
    }

    void send(Producer<byte[]> p, long... seqs) throws Exception {
        for (long s : seqs) {
            p.newMessage().sequenceId(s).value(bytes("s" + s)).send();
        }
    }

    @Test
    void namespaceDedupDropsRepeats() throws Exception {
        String ns = namespace();
        admin.namespaces().setDeduplicationStatus(ns, true);
        assertTrue(admin.namespaces().getPolicies(ns).deduplicationEnabled);
        String t = "persistent://" + ns + "/" + unique("d");
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe()) {
            try (Producer<byte[]> p = client.newProducer().topic(t).producerName("dedup-p").enableBatching(false).create()) {
                send(p, 0, 1, 2, 1, 2, 3);
            }
            assertTexts(seq("s", 0, 4), receive(c, 4, true));
            assertNoMessage(c, 1000);
            try (Producer<byte[]> p = client.newProducer().topic(t).producerName("dedup-p").enableBatching(false).create()) {
                assertEquals(3, p.getLastSequenceId());
                send(p, 3, 4);
            }
            assertTexts(List.of("s4"), receive(c, 1, true));
            assertNoMessage(c, 1000);
        }
    }

    @Test
    void namespaceDedupOnLoadedTopic() throws Exception {
        String ns = namespace();
        String t = "persistent://" + ns + "/" + unique("d");
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).producerName(unique("p")).enableBatching(false).create()) {
            send(p, 0);
            admin.namespaces().setDeduplicationStatus(ns, true);
            eventually(Duration.ofSeconds(10), quietly(() -> "Enabled".equals(admin.topics().getStats(t).getDeduplicationStatus())));
            send(p, 0, 1);
            assertTexts(List.of("s0", "s1"), receive(c, 2, true));
            assertNoMessage(c, 1000);
        }
    }

    @Test
    void dedupOffKeepsRepeats() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).producerName(unique("p")).enableBatching(false).create()) {
            send(p, 0, 1, 1);
            assertTexts(List.of("s0", "s1", "s1"), receive(c, 3, true));
        }
    }

    @Test
    void topicDedupPolicy() throws Exception {
        String t = topic();
        admin.topics().createNonPartitionedTopic(t);
        admin.topicPolicies().setDeduplicationStatus(t, true);
        assertEquals(Boolean.TRUE, admin.topicPolicies().getDeduplicationStatus(t));
        // The topic is loaded: the broker rebuilds its state, then says so.
        eventually(Duration.ofSeconds(10), quietly(() -> "Enabled".equals(admin.topics().getStats(t).getDeduplicationStatus())));
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).producerName(unique("p")).enableBatching(false).create()) {
            send(p, 0, 0, 1);
            assertTexts(List.of("s0", "s1"), receive(c, 2, true));
            assertNoMessage(c, 1000);
        }
    }
}
