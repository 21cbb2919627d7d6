package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class ReaderSeekTest extends ClientTest {
    static List<String> read(Reader<byte[]> r, int n) throws Exception {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Message<byte[]> m = r.readNext(RECEIVE_SECONDS, TimeUnit.SECONDS);
            if (m == null) {
                break;
            }
            out.add(text(m));
        }
        return out;
    }

    @Test
    void earliestAndLatest() throws Exception {
        String t = topic();
        produce(t, "r", 3);
        try (Reader<byte[]> earliest = client.newReader().topic(t).startMessageId(MessageId.earliest).create();
             Reader<byte[]> latest = client.newReader().topic(t).startMessageId(MessageId.latest).create()) {
            produce(t, "r", 1);
            assertEquals(List.of("r0", "r1", "r2", "r0"), read(earliest, 4));
            assertEquals(List.of("r0"), read(latest, 1));
        }
    }

    @ParameterizedTest(name = "inclusive={0}")
    @ValueSource(booleans = {false, true})
    void fromMessageId(boolean inclusive) throws Exception {
        String t = topic();
        List<MessageId> ids = produce(t, "r", 5);
        var b = client.newReader().topic(t).startMessageId(ids.get(2));
        if (inclusive) {
            b.startMessageIdInclusive();
        }
        try (Reader<byte[]> r = b.create()) {
            int first = inclusive ? 2 : 3;
            assertEquals(seq("r", first, 5), read(r, 5 - first));
        }
    }

    @Test
    void fromSerializedId() throws Exception {
        String t = topic();
        List<MessageId> ids = produce(t, "r", 3);
        try (Reader<byte[]> r = client.newReader().topic(t).startMessageId(MessageId.fromByteArray(ids.get(0).toByteArray())).create()) {
            assertEquals(List.of("r1"), read(r, 1));
        }
    }

    @Test
    void hasMessageAvailable() throws Exception {
        String t = topic();
        produce(t, "r", 2);
        try (Reader<byte[]> r = client.newReader().topic(t).startMessageId(MessageId.earliest).create()) {
            List<String> seen = new ArrayList<>();
            while (r.hasMessageAvailable()) {
                seen.add(text(r.readNext(RECEIVE_SECONDS, TimeUnit.SECONDS)));
            }
            assertEquals(List.of("r0", "r1"), seen);
            assertFalse(r.hasMessageAvailable());
            assertNull(r.readNext(500, TimeUnit.MILLISECONDS));
        }
    }

    @Test
    void readerSeek() throws Exception {
        String t = topic();
        List<MessageId> ids = produce(t, "r", 10);
        try (Reader<byte[]> r = client.newReader().topic(t).startMessageId(MessageId.earliest).create()) {
            List<Long> times = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                times.add(r.readNext(RECEIVE_SECONDS, TimeUnit.SECONDS).getPublishTime());
            }
            r.seek(ids.get(3));
            assertEquals(seq("r", 4, 10), read(r, 6));
            r.seek(times.get(5));
            int want = 0;
            while (times.get(want) < times.get(5)) {
                want++;
            }
            assertEquals(seq("r", want, 10), read(r, 10 - want));
            r.seek(MessageId.earliest);
            assertEquals(List.of("r0"), read(r, 1));
        }
    }

    @Test
    void consumerSeek() throws Exception {
        String t = topic();
        List<MessageId> ids = produce(t, "r", 10);
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            List<Message<byte[]>> all = receive(c, 10, true);
            c.seek(ids.get(3));
            assertTexts(seq("r", 4, 10), receive(c, 6, true));
            c.seek(all.get(5).getPublishTime());
            int want = 0;
            while (all.get(want).getPublishTime() < all.get(5).getPublishTime()) {
                want++;
            }
            assertTexts(seq("r", want, 10), receive(c, 10 - want, true));
            c.seek(MessageId.earliest);
            assertTexts(List.of("r0"), receive(c, 1, true));
        }
    }

    @Test
    void readerOnPartitionedTopic() throws Exception {
        String t = topic();
        admin.topics().createPartitionedTopic(t, 2);
        try (Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            for (int i = 0; i < 6; i++) {
                p.send(bytes("p" + i));
            }
        }
        try (Reader<byte[]> r = client.newReader().topic(t).startMessageId(MessageId.earliest).create()) {
            List<String> got = read(r, 6);
            got.sort(null);
            assertEquals(seq("p", 0, 6), got);
        }
    }
}
