package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

class AckTest extends ClientTest {
    Consumer<byte[]> shared(String t) throws PulsarClientException {
        return client.newConsumer().topic(t).subscriptionName("sub").subscriptionType(SubscriptionType.Shared).subscribe();
    }

    @Test
    void individualAckLeavesTheRest() throws Exception {
        String t = topic();
        Consumer<byte[]> c = shared(t);
        produce(t, "m", 4);
        List<Message<byte[]>> msgs = receive(c, 4, false);
        c.acknowledge(msgs.get(0));
        c.acknowledge(msgs.get(2).getMessageId());
        c.close();
        try (Consumer<byte[]> again = shared(t)) {
            List<String> got = texts(receive(again, 2, true));
            got.sort(null);
            assertEquals(List.of("m1", "m3"), got);
            assertNoMessage(again, 1000);
            eventually(Duration.ofSeconds(10), quietly(() -> backlog(t, "sub") == 0));
        }
    }

    @Test
    void cumulativeAck() throws Exception {
        String t = topic();
        Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
        produce(t, "m", 5);
        List<Message<byte[]>> msgs = receive(c, 5, false);
        c.acknowledgeCumulative(msgs.get(2));
        eventually(Duration.ofSeconds(10), quietly(() -> backlog(t, "sub") == 2));
        c.close();
        try (Consumer<byte[]> again = client.newConsumer().topic(t).subscriptionName("sub").subscribe()) {
            assertTexts(List.of("m3", "m4"), receive(again, 2, true));
        }
    }

    @Test
    void cumulativeAckRefusedOnShared() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = shared(t)) {
            produce(t, "m", 1);
            Message<byte[]> m = receive(c, 1, false).get(0);
            assertThrows(PulsarClientException.InvalidConfigurationException.class, () -> c.acknowledgeCumulative(m));
        }
    }

    @Test
    void negativeAckRedelivers() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                .subscriptionType(SubscriptionType.Shared)
                .negativeAckRedeliveryDelay(300, TimeUnit.MILLISECONDS).subscribe()) {
            produce(t, "m", 3);
            List<Message<byte[]>> msgs = receive(c, 3, false);
            c.acknowledge(msgs.get(0));
            c.acknowledge(msgs.get(2));
            c.negativeAcknowledge(msgs.get(1));
            Message<byte[]> again = receive(c, 1, true).get(0);
            assertEquals("m1", text(again));
            assertEquals(1, again.getRedeliveryCount());
            assertNoMessage(c, 1000);
        }
    }

    @Test
    void ackTimeoutRedelivers() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                .subscriptionType(SubscriptionType.Shared)
                .ackTimeout(1, TimeUnit.SECONDS).ackTimeoutTickTime(100, TimeUnit.MILLISECONDS).subscribe()) {
            produce(t, "m", 2);
            List<Message<byte[]>> first = receive(c, 2, false);
            c.acknowledge(first.get(0));
            Message<byte[]> again = receive(c, 1, true).get(0);
            assertEquals("m1", text(again));
            assertTrue(again.getRedeliveryCount() >= 1);
        }
    }

    @Test
    void redeliverUnacknowledged() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe()) {
            produce(t, "m", 3);
            receive(c, 3, false);
            c.redeliverUnacknowledgedMessages();
            assertTexts(seq("m", 0, 3), receive(c, 3, true));
        }
    }

    @Test
    void deadLetterTopic() throws Exception {
        String t = topic();
        String dlq = t + "-dlq";
        try (Consumer<byte[]> dead = client.newConsumer().topic(dlq).subscriptionName("dlq-sub").subscribe();
             Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                     .subscriptionType(SubscriptionType.Shared)
                     .negativeAckRedeliveryDelay(200, TimeUnit.MILLISECONDS)
                     .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2).deadLetterTopic(dlq).build())
                     .subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            p.newMessage().value(bytes("poison")).property("k", "v").send();
            p.send(bytes("good"));
            int deliveries = 0;
            int good = 0;
            while (deliveries < 3 || good < 1) {
                Message<byte[]> m = c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS);
                assertNotNull(m);
                if (text(m).equals("good")) {
                    good++;
                    c.acknowledge(m);
                    continue;
                }
                assertEquals(deliveries, m.getRedeliveryCount());
                deliveries++;
                c.negativeAcknowledge(m);
            }
            Message<byte[]> d = receive(dead, 1, true).get(0);
            assertEquals("poison", text(d));
            assertEquals("v", d.getProperty("k"));
            assertNoMessage(c, 1500);
        }
    }

    @Test
    void retryLetterTopic() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                .subscriptionType(SubscriptionType.Shared).enableRetry(true)
                .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2)
                        .retryLetterTopic(t + "-retry").deadLetterTopic(t + "-dead").build())
                .subscribe();
             Consumer<byte[]> dead = client.newConsumer().topic(t + "-dead").subscriptionName("d").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).create()) {
            p.send(bytes("again"));
            // Each retry is a new message on the retry topic; the client
            // counts them in the RECONSUMETIMES property.
            List<String> times = new ArrayList<>();
            long start = System.nanoTime();
            for (int i = 0; i < 3; i++) {
                Message<byte[]> m = receive(c, 1, false).get(0);
                assertEquals("again", text(m));
                times.add(m.getProperty("RECONSUMETIMES"));
                c.reconsumeLater(m, 500, TimeUnit.MILLISECONDS);
            }
            assertTrue(System.nanoTime() - start >= TimeUnit.MILLISECONDS.toNanos(900), "reconsumeLater must delay");
            Message<byte[]> d = receive(dead, 1, true).get(0);
            assertEquals("again", text(d));
            assertEquals(Arrays.asList(null, "1", "2"), times);
        }
    }
}
