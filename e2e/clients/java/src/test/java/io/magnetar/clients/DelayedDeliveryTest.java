package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

class DelayedDeliveryTest extends ClientTest {
    Consumer<byte[]> subscribe(String t, SubscriptionType type) throws Exception {
        return client.newConsumer().topic(t).subscriptionName("sub").subscriptionType(type).subscribe();
    }

    @Test
    void deliverAfter() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = subscribe(t, SubscriptionType.Shared);
             Producer<byte[]> p = client.newProducer().topic(t).create()) {
            long start = System.nanoTime();
            p.newMessage().value(bytes("late")).deliverAfter(2, TimeUnit.SECONDS).send();
            p.send(bytes("now"));
            assertTexts(List.of("now", "late"), receive(c, 2, true));
            assertTrue(System.nanoTime() - start >= TimeUnit.MILLISECONDS.toNanos(1900));
        }
    }

    @Test
    void deliverAt() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = subscribe(t, SubscriptionType.Key_Shared);
             Producer<byte[]> p = client.newProducer().topic(t).create()) {
            long at = System.currentTimeMillis() + 2000;
            p.newMessage().key("k").value(bytes("at")).deliverAt(at).send();
            Message<byte[]> m = receive(c, 1, true).get(0);
            assertEquals("at", text(m));
            assertTrue(System.currentTimeMillis() >= at - 100);
        }
    }

    @Test
    void ignoredOnExclusive() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = subscribe(t, SubscriptionType.Exclusive);
             Producer<byte[]> p = client.newProducer().topic(t).create()) {
            long start = System.nanoTime();
            p.newMessage().value(bytes("x")).deliverAfter(5, TimeUnit.SECONDS).send();
            receive(c, 1, true);
            assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(4));
        }
    }
}
