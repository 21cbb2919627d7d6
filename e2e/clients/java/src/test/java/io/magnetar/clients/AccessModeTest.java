package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.Test;

class AccessModeTest extends ClientTest {
    Producer<byte[]> producer(String t, ProducerAccessMode mode) throws PulsarClientException {
        return client.newProducer().topic(t).accessMode(mode).enableBatching(false).create();
    }

    @Test
    void exclusiveRefusesOthers() throws Exception {
        String t = topic();
        try (Producer<byte[]> p = producer(t, ProducerAccessMode.Exclusive)) {
            // A second exclusive producer is fenced out, a shared one is busy.
            assertThrows(PulsarClientException.ProducerFencedException.class, () -> producer(t, ProducerAccessMode.Exclusive));
            assertThrows(PulsarClientException.ProducerBusyException.class, () -> producer(t, ProducerAccessMode.Shared));
            p.send(bytes("x"));
        }
    }

    @Test
    void sharedBlocksExclusive() throws Exception {
        String t = topic();
        try (Producer<byte[]> a = producer(t, ProducerAccessMode.Shared);
             Producer<byte[]> b = producer(t, ProducerAccessMode.Shared)) {
            assertThrows(PulsarClientException.ProducerFencedException.class, () -> producer(t, ProducerAccessMode.Exclusive));
        }
    }

    @Test
    void waitForExclusive() throws Exception {
        String t = topic();
        Producer<byte[]> first = producer(t, ProducerAccessMode.Exclusive);
        CompletableFuture<Producer<byte[]>> waiting = client.newProducer().topic(t)
                .accessMode(ProducerAccessMode.WaitForExclusive).createAsync();
        Thread.sleep(1500);
        assertFalse(waiting.isDone(), "WaitForExclusive must wait while another producer is exclusive");
        first.close();
        try (Producer<byte[]> p = waiting.get(RECEIVE_SECONDS, TimeUnit.SECONDS)) {
            p.send(bytes("mine"));
        }
    }

    @Test
    void exclusiveWithFencing() throws Exception {
        String t = topic();
        Producer<byte[]> old = producer(t, ProducerAccessMode.Exclusive);
        old.send(bytes("old"));
        try (Producer<byte[]> fencer = producer(t, ProducerAccessMode.ExclusiveWithFencing)) {
            fencer.send(bytes("new"));
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> old.sendAsync(bytes("fenced")).get(RECEIVE_SECONDS, TimeUnit.SECONDS));
            assertFalse(e.getCause() instanceof java.util.concurrent.TimeoutException);
        } finally {
            old.closeAsync();
        }
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            assertTexts(List.of("old", "new"), receive(c, 2, true));
            assertNoMessage(c, 500);
        }
    }
}
