package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

class ChunkingTest extends ClientTest {
    static byte[] random(int n) {
        byte[] b = new byte[n];
        new Random(n).nextBytes(b);
        return b;
    }

    Producer<byte[]> chunking(String t) throws Exception {
        return client.newProducer().topic(t).enableChunking(true).enableBatching(false).create();
    }

    @Test
    void chunkedMessage() throws Exception {
        String t = topic();
        byte[] big = random(3 << 20);
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").subscribe();
             Producer<byte[]> p = chunking(t)) {
            p.send(big);
            p.send(bytes("small"));
            Message<byte[]> m = c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS);
            assertArrayEquals(big, m.getData());
            c.acknowledge(m);
            assertEquals("small", text(c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS)));
        }
    }

    @Test
    void chunkedRedelivery() throws Exception {
        String t = topic();
        byte[] big = random((1 << 20) + 12345);
        try (Producer<byte[]> p = chunking(t)) {
            Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared).subscribe();
            p.send(big);
            assertArrayEquals(big, c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS).getData());
            c.close();
            try (Consumer<byte[]> again = client.newConsumer().topic(t).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared).subscribe()) {
                Message<byte[]> m = again.receive(RECEIVE_SECONDS, TimeUnit.SECONDS);
                assertArrayEquals(big, m.getData());
                again.acknowledge(m);
            }
        }
    }

    @Test
    void chunkedReaderAndSeek() throws Exception {
        String t = topic();
        byte[] big = random(2 << 20);
        MessageId bigId;
        try (Producer<byte[]> p = chunking(t)) {
            p.send(bytes("first"));
            bigId = p.send(big);
            p.send(bytes("last"));
        }
        try (Reader<byte[]> r = client.newReader().topic(t).startMessageId(MessageId.earliest).create()) {
            assertEquals("first", text(r.readNext(RECEIVE_SECONDS, TimeUnit.SECONDS)));
            Message<byte[]> m = r.readNext(RECEIVE_SECONDS, TimeUnit.SECONDS);
            assertArrayEquals(big, m.getData());
            assertEquals(bigId, m.getMessageId());
            assertEquals("last", text(r.readNext(RECEIVE_SECONDS, TimeUnit.SECONDS)));
        }
        try (Reader<byte[]> r = client.newReader().topic(t).startMessageId(bigId).startMessageIdInclusive().create()) {
            assertArrayEquals(big, r.readNext(RECEIVE_SECONDS, TimeUnit.SECONDS).getData());
        }
    }
}
