package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Messages;
import org.apache.pulsar.client.api.BatchReceivePolicy;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.impl.BatchMessageIdImpl;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class ProduceConsumeTest extends ClientTest {
    static List<Arguments> codecs() {
        List<Arguments> out = new ArrayList<>();
        for (CompressionType c : new CompressionType[] {CompressionType.NONE, CompressionType.LZ4,
                CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY}) {
            out.add(Arguments.of(c, false));
            out.add(Arguments.of(c, true));
        }
        return out;
    }

    @ParameterizedTest(name = "{0} batching={1}")
    @MethodSource("codecs")
    void produceConsume(CompressionType codec, boolean batching) throws Exception {
        String t = topic();
        int n = 50;
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).compressionType(codec)
                     .enableBatching(batching).batchingMaxMessages(10)
                     .batchingMaxPublishDelay(50, TimeUnit.MILLISECONDS).create()) {
            List<String> want = new ArrayList<>();
            List<CompletableFuture<MessageId>> sends = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String s = ("m" + i + "-").repeat(40);
                want.add(s);
                sends.add(p.sendAsync(bytes(s)));
            }
            p.flush();
            CompletableFuture.allOf(sends.toArray(new CompletableFuture[0])).get(RECEIVE_SECONDS, TimeUnit.SECONDS);
            List<Message<byte[]>> got = receive(c, n, true);
            assertTexts(want, got);
            if (batching) {
                assertTrue(got.stream().anyMatch(m -> m.getMessageId() instanceof BatchMessageIdImpl b && b.getBatchIndex() > 0),
                        "batched messages should share entries");
            }
        }
    }

    @Test
    void keyPropertiesEventTime() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).producerName("named").create()) {
            p.newMessage().key("k1").orderingKey(bytes("o1")).property("a", "1").property("b", "two")
                    .eventTime(1234567).value(bytes("hello")).send();
            Message<byte[]> m = c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS);
            assertEquals("hello", text(m));
            assertEquals("k1", m.getKey());
            assertEquals("o1", new String(m.getOrderingKey()));
            assertEquals(Map.of("a", "1", "b", "two"), m.getProperties());
            assertEquals(1234567, m.getEventTime());
            assertTrue(m.getPublishTime() > 0);
            assertEquals("named", m.getProducerName());
            assertEquals(t, m.getTopicName());
            assertEquals(0, m.getSequenceId());
            c.acknowledge(m);
        }
    }

    @Test
    void tooBigWithoutChunking() throws Exception {
        try (Producer<byte[]> p = client.newProducer().topic(topic()).enableBatching(false).create()) {
            assertThrows(PulsarClientException.class, () -> p.send(new byte[2 << 20]));
        }
    }

    @Test
    void messageIdsAndLastSequence() throws Exception {
        String t = topic();
        try (Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            List<MessageId> ids = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                ids.add(p.send(bytes("x" + i)));
            }
            assertEquals(4, p.getLastSequenceId());
            try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
                List<Message<byte[]>> got = receive(c, 5, true);
                for (int i = 0; i < 5; i++) {
                    assertEquals(ids.get(i), got.get(i).getMessageId());
                }
                assertEquals(ids.get(4), c.getLastMessageId());
                assertTrue(ids.get(0).compareTo(ids.get(4)) < 0);
            }
        }
    }

    @Test
    void batchReceive() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                .batchReceivePolicy(BatchReceivePolicy.builder().maxNumMessages(10).timeout(2, TimeUnit.SECONDS).build())
                .subscribe();
             Producer<byte[]> p = client.newProducer().topic(t).create()) {
            for (int i = 0; i < 10; i++) {
                p.sendAsync(bytes("b" + i));
            }
            p.flush();
            List<String> got = new ArrayList<>();
            while (got.size() < 10) {
                Messages<byte[]> batch = c.batchReceive();
                for (Message<byte[]> m : batch) {
                    got.add(text(m));
                }
                c.acknowledge(batch);
            }
            assertEquals(seq("b", 0, 10), got);
        }
    }
}
