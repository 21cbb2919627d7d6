package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageRouter;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.TopicMetadata;
import org.junit.jupiter.api.Test;

class TopicsTest extends ClientTest {
    static Set<String> partitions(String t, int n) {
        Set<String> out = new HashSet<>();
        for (int i = 0; i < n; i++) {
            out.add(t + "-partition-" + i);
        }
        return out;
    }

    @Test
    void partitionedRoundRobin() throws Exception {
        String t = topic();
        admin.topics().createPartitionedTopic(t, 3);
        assertEquals(partitions(t, 3), new HashSet<>(client.getPartitionsForTopic(t).get()));
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false)
                     .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create()) {
            for (int i = 0; i < 30; i++) {
                p.send(bytes("p" + i));
            }
            List<Message<byte[]>> got = receive(c, 30, true);
            Set<String> from = new HashSet<>();
            Set<String> payloads = new HashSet<>();
            for (Message<byte[]> m : got) {
                from.add(m.getTopicName());
                payloads.add(text(m));
            }
            assertEquals(partitions(t, 3), from);
            assertEquals(new HashSet<>(seq("p", 0, 30)), payloads);
        }
    }

    @Test
    void partitionedKeyRouting() throws Exception {
        String t = topic();
        admin.topics().createPartitionedTopic(t, 4);
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            for (int i = 0; i < 20; i++) {
                p.newMessage().key("k" + (i % 3)).value(bytes("v" + i)).send();
            }
            Map<String, String> where = new HashMap<>();
            for (Message<byte[]> m : receive(c, 20, true)) {
                assertEquals(where.computeIfAbsent(m.getKey(), k -> m.getTopicName()), m.getTopicName());
            }
        }
    }

    @Test
    void customRouter() throws Exception {
        String t = topic();
        admin.topics().createPartitionedTopic(t, 2);
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).messageRoutingMode(MessageRoutingMode.CustomPartition)
                     .messageRouter(new MessageRouter() {
                         @Override
                         public int choosePartition(Message<?> msg, TopicMetadata metadata) {
                             return 1;
                         }
                     }).create()) {
            for (int i = 0; i < 5; i++) {
                p.send(bytes("v" + i));
            }
            for (Message<byte[]> m : receive(c, 5, true)) {
                assertEquals(t + "-partition-1", m.getTopicName());
            }
        }
    }

    @Test
    void multiTopic() throws Exception {
        List<String> topics = List.of(topic(), topic(), topic());
        try (Consumer<byte[]> c = client.newConsumer().topics(topics).subscriptionName("sub").subscribe()) {
            for (int i = 0; i < topics.size(); i++) {
                try (Producer<byte[]> p = client.newProducer().topic(topics.get(i)).create()) {
                    p.send(bytes("from-" + i));
                }
            }
            Set<String> got = new HashSet<>();
            Set<String> from = new HashSet<>();
            for (Message<byte[]> m : receive(c, 3, true)) {
                got.add(text(m));
                from.add(m.getTopicName());
            }
            assertEquals(Set.of("from-0", "from-1", "from-2"), got);
            assertEquals(new HashSet<>(topics), from);
        }
    }

    @Test
    void pattern() throws Exception {
        String prefix = unique("pat");
        String existing = "persistent://public/default/" + prefix + "-a";
        try (Producer<byte[]> p = client.newProducer().topic(existing).create()) {
            p.send(bytes("a0"));
        }
        try (Consumer<byte[]> c = client.newConsumer()
                .topicsPattern(Pattern.compile("persistent://public/default/" + prefix + "-.*"))
                .subscriptionName("sub").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .patternAutoDiscoveryPeriod(1, TimeUnit.SECONDS).subscribe()) {
            assertTexts(List.of("a0"), receive(c, 1, true));
            String later = "persistent://public/default/" + prefix + "-b";
            try (Producer<byte[]> p = client.newProducer().topic(later).create()) {
                p.send(bytes("b0"));
            }
            Message<byte[]> m = c.receive(15, TimeUnit.SECONDS);
            assertEquals("b0", text(m));
            assertEquals(later, m.getTopicName());
            try (Producer<byte[]> p = client.newProducer().topic("persistent://public/default/other-" + prefix).create()) {
                p.send(bytes("no"));
            }
            assertNoMessage(c, 2500);
        }
    }

    @Test
    void nonPersistent() throws Exception {
        String t = "non-persistent://public/default/" + unique("np");
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).create()) {
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                p.send(bytes("np" + i));
                want.add("np" + i);
            }
            assertTexts(want, receive(c, 10, true));
            try (Consumer<byte[]> late = client.newConsumer().topic(t).subscriptionName("late")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
                p.send(bytes("after"));
                assertTexts(List.of("after"), receive(late, 1, true));
                assertTexts(List.of("after"), receive(c, 1, true));
            }
        }
    }
}
