package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.KeySharedPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Range;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

class SubscriptionTypesTest extends ClientTest {
    Consumer<byte[]> subscribe(String t, SubscriptionType type, String name) throws PulsarClientException {
        return client.newConsumer().topic(t).subscriptionName("sub").subscriptionType(type)
                .consumerName(name).receiverQueueSize(10).subscribe();
    }

    @Test
    void exclusiveRefusesSecondConsumer() throws Exception {
        String t = topic();
        try (Consumer<byte[]> first = subscribe(t, SubscriptionType.Exclusive, "a")) {
            assertThrows(PulsarClientException.ConsumerBusyException.class,
                    () -> subscribe(t, SubscriptionType.Exclusive, "b"));
            try (Producer<byte[]> p = client.newProducer().topic(t).create()) {
                p.send(bytes("x"));
            }
            assertEquals("x", text(first.receive(RECEIVE_SECONDS, TimeUnit.SECONDS)));
        }
    }

    @Test
    void sharedSpreadsMessages() throws Exception {
        String t = topic();
        try (Consumer<byte[]> a = subscribe(t, SubscriptionType.Shared, "a");
             Consumer<byte[]> b = subscribe(t, SubscriptionType.Shared, "b");
             Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            int n = 40;
            for (int i = 0; i < n; i++) {
                p.send(bytes("s" + i));
            }
            List<String> fromA = new ArrayList<>();
            List<String> fromB = new ArrayList<>();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (fromA.size() + fromB.size() < n && System.nanoTime() < deadline) {
                Message<byte[]> m = a.receive(100, TimeUnit.MILLISECONDS);
                if (m != null) {
                    a.acknowledge(m);
                    fromA.add(text(m));
                }
                m = b.receive(100, TimeUnit.MILLISECONDS);
                if (m != null) {
                    b.acknowledge(m);
                    fromB.add(text(m));
                }
            }
            assertEquals(n, fromA.size() + fromB.size());
            HashSet<String> all = new HashSet<>(fromA);
            all.addAll(fromB);
            assertEquals(new HashSet<>(seq("s", 0, n)), all);
            assertFalse(fromA.isEmpty() || fromB.isEmpty(), "both consumers should get messages");
        }
    }

    @Test
    void failoverSwitchesOnClose() throws Exception {
        String t = topic();
        Consumer<byte[]> a = subscribe(t, SubscriptionType.Failover, "a");
        try (Consumer<byte[]> b = subscribe(t, SubscriptionType.Failover, "b");
             Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            for (int i = 0; i < 5; i++) {
                p.send(bytes("f" + i));
            }
            assertTexts(seq("f", 0, 5), receive(a, 5, true));
            assertNoMessage(b, 500);
            a.close();
            for (int i = 5; i < 10; i++) {
                p.send(bytes("f" + i));
            }
            assertTexts(seq("f", 5, 10), receive(b, 5, true));
        }
    }

    @Test
    void keySharedKeepsKeysTogether() throws Exception {
        String t = topic();
        try (Consumer<byte[]> a = subscribe(t, SubscriptionType.Key_Shared, "a");
             Consumer<byte[]> b = subscribe(t, SubscriptionType.Key_Shared, "b");
             Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            int n = 80;
            for (int i = 0; i < n; i++) {
                p.newMessage().key("key-" + (i % 8)).value(bytes(Integer.toString(i))).send();
            }
            Map<String, String> owner = new HashMap<>();
            Map<String, List<Integer>> order = new HashMap<>();
            int total = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (total < n && System.nanoTime() < deadline) {
                for (Consumer<byte[]> c : List.of(a, b)) {
                    Message<byte[]> m = c.receive(100, TimeUnit.MILLISECONDS);
                    if (m == null) {
                        continue;
                    }
                    c.acknowledge(m);
                    total++;
                    String prev = owner.putIfAbsent(m.getKey(), c.getConsumerName());
                    assertTrue(prev == null || prev.equals(c.getConsumerName()), "key " + m.getKey() + " went to two consumers");
                    order.computeIfAbsent(m.getKey(), k -> new ArrayList<>()).add(Integer.parseInt(text(m)));
                }
            }
            assertEquals(n, total);
            for (List<Integer> s : order.values()) {
                List<Integer> sorted = new ArrayList<>(s);
                sorted.sort(null);
                assertEquals(sorted, s);
            }
            assertEquals(2, new HashSet<>(owner.values()).size(), "8 keys over 2 consumers should use both");
        }
    }

    @Test
    void keySharedStickyRanges() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                .subscriptionType(SubscriptionType.Key_Shared)
                .keySharedPolicy(KeySharedPolicy.stickyHashRange().ranges(Range.of(0, 65535))).subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).create()) {
            for (int i = 0; i < 10; i++) {
                p.newMessage().key("k" + i).value(bytes("v" + i)).send();
            }
            assertTexts(seq("v", 0, 10), receive(c, 10, true));
        }
    }

    @Test
    void initialPosition() throws Exception {
        String t = topic();
        try (Producer<byte[]> p = client.newProducer().topic(t).create()) {
            p.send(bytes("before"));
            try (Consumer<byte[]> latest = client.newConsumer().topic(t).subscriptionName("latest").subscribe();
                 Consumer<byte[]> earliest = client.newConsumer().topic(t).subscriptionName("earliest")
                         .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
                p.send(bytes("after"));
                assertTexts(List.of("after"), receive(latest, 1, true));
                assertTexts(List.of("before", "after"), receive(earliest, 2, true));
            }
        }
    }

    @Test
    void unsubscribeDropsBacklog() throws Exception {
        String t = topic();
        try (Producer<byte[]> p = client.newProducer().topic(t).create()) {
            Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
            p.send(bytes("old"));
            c.unsubscribe();
            eventually(Duration.ofSeconds(10), quietly(() -> !admin.topics().getSubscriptions(t).contains("sub")));
            try (Consumer<byte[]> again = client.newConsumer().topic(t).subscriptionName("sub").subscribe()) {
                p.send(bytes("new"));
                assertTexts(List.of("new"), receive(again, 1, true));
            }
        }
    }
}
