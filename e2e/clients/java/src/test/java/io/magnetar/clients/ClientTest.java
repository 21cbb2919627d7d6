package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

/**
 * Base of every test class: one client and one admin client per class,
 * connected to the broker named by the system property magnetar.serviceUrl
 * (or MAGNETAR_SERVICE_URL) and magnetar.adminUrl (or MAGNETAR_ADMIN_URL).
 * Without them every test is skipped. Each test is bounded to 60 seconds.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(60)
abstract class ClientTest {
    /** Bound for one receive; a test that waits longer has failed. */
    static final int RECEIVE_SECONDS = 10;

    PulsarClient client;
    PulsarAdmin admin;

    static String setting(String property, String env) {
        String v = System.getProperty(property);
        if (v == null || v.isEmpty()) {
            v = System.getenv(env);
        }
        return v == null || v.isEmpty() ? null : v;
    }

    @BeforeAll
    void connect() throws Exception {
        String service = setting("magnetar.serviceUrl", "MAGNETAR_SERVICE_URL");
        String http = setting("magnetar.adminUrl", "MAGNETAR_ADMIN_URL");
        assumeTrue(service != null && http != null, "magnetar.serviceUrl and magnetar.adminUrl are not set");
        client = PulsarClient.builder().serviceUrl(service)
                .operationTimeout(30, TimeUnit.SECONDS).build();
        admin = PulsarAdmin.builder().serviceHttpUrl(http)
                .requestTimeout(30, TimeUnit.SECONDS).build();
    }

    @AfterAll
    void close() throws Exception {
        if (client != null) {
            client.close();
        }
        if (admin != null) {
            admin.close();
        }
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 12);
    }

    static String topic() {
        return "persistent://public/default/" + unique("java");
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String text(Message<byte[]> m) {
        return new String(m.getData(), StandardCharsets.UTF_8);
    }

    /** Receives n messages, acknowledging each when ack. */
    static <T> List<Message<T>> receive(Consumer<T> c, int n, boolean ack) throws PulsarClientException {
        List<Message<T>> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Message<T> m = c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS);
            assertNotNull(m, "message " + i + " of " + n + " not received in " + RECEIVE_SECONDS + "s");
            if (ack) {
                c.acknowledge(m);
            }
            out.add(m);
        }
        return out;
    }

    static List<String> texts(List<Message<byte[]>> msgs) {
        List<String> out = new ArrayList<>();
        for (Message<byte[]> m : msgs) {
            out.add(text(m));
        }
        return out;
    }

    static List<String> seq(String prefix, int from, int to) {
        List<String> out = new ArrayList<>();
        for (int i = from; i < to; i++) {
            out.add(prefix + i);
        }
        return out;
    }

    /** Fails when c receives anything within millis. */
    static <T> void assertNoMessage(Consumer<T> c, int millis) throws PulsarClientException {
        Message<T> m = c.receive(millis, TimeUnit.MILLISECONDS);
        assertNull(m, () -> "unexpected message " + m.getMessageId());
    }

    /** Polls cond every 100 ms until it holds; fails after timeout. */
    static void eventually(Duration timeout, BooleanSupplier cond) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("condition not met after " + timeout);
            }
            Thread.sleep(100);
        }
    }

    /** A BooleanSupplier that may throw. */
    interface Check {
        boolean get() throws Exception;
    }

    static BooleanSupplier quietly(Check c) {
        return () -> {
            try {
                return c.get();
            } catch (Exception e) {
                return false;
            }
        };
    }

    /** Sends n messages prefix0, prefix1, ... without batching; returns their ids. */
    List<MessageId> produce(String t, String prefix, int n) throws PulsarClientException {
        List<MessageId> ids = new ArrayList<>();
        try (Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            for (int i = 0; i < n; i++) {
                ids.add(p.send(bytes(prefix + i)));
            }
        }
        return ids;
    }

    /** The message backlog of subscription sub, from the topic's stats. */
    long backlog(String t, String sub) throws Exception {
        return admin.topics().getStats(t).getSubscriptions().get(sub).getMsgBacklog();
    }

    static void assertTexts(List<String> want, List<Message<byte[]>> got) {
        assertEquals(want, texts(got));
    }
}
