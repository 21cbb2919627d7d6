package io.magnetar.e2e;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import org.apache.pulsar.client.api.ClientBuilder;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.ServiceUrlProvider;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.TypedMessageBuilder;
import org.apache.pulsar.client.impl.ControlledClusterFailover;

/**
 * A Pulsar Java client for Magnetar's end-to-end tests: one producer or one consumer, optionally
 * following a failover endpoint through {@link ControlledClusterFailover}.
 *
 * <pre>
 * produce --service-url URL [--provider-url URL --provider-token KEY --check-interval-ms N]
 *         [--auth-plugin CLASS --auth-params PARAMS] [--tls-trust-certs-file PEM]
 *         --topic T [--name P] [--key K] [--count N] [--rate R] [--batching=false]
 * consume --service-url URL [--provider-url ...] --topic T --subscription S [--type Shared]
 * </pre>
 *
 * <p>Standard output carries one line per event, flushed as it is written, for the test that
 * reads it:
 *
 * <pre>
 * URL &lt;epoch-ms&gt; &lt;service-url&gt;     the client's service URL, at start and at each change
 * READY                              the producer or consumer is created
 * ACK &lt;seq&gt; &lt;message-id&gt;           message seq (payload "&lt;name&gt;-&lt;seq&gt;") was acknowledged
 * ERR &lt;seq&gt; &lt;error&gt;                 its send failed
 * MSG &lt;payload&gt; &lt;message-id&gt; &lt;from&gt;  a message was received (from: the cluster it was
 *                                    replicated from, "-" when produced locally); it is then acked
 * DONE &lt;sent&gt; &lt;acked&gt; &lt;failed&gt;     at exit (a consumer prints its count as all three)
 * FATAL &lt;error&gt;                      setup failed; the exit status is 1
 * </pre>
 *
 * <p>It stops, flushing pending sends, when its standard input closes, on SIGTERM, or (produce)
 * after --count messages.
 */
public final class JavaClient {
    private static final PrintStream OUT =
            new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false,
                    StandardCharsets.UTF_8);

    private final Map<String, String> flags;
    private final CountDownLatch stopping = new CountDownLatch(1);
    private final CountDownLatch finished = new CountDownLatch(1);
    private volatile int status;

    private JavaClient(Map<String, String> flags) {
        this.flags = flags;
    }

    public static void main(String[] args) {
        if (args.length < 1 || !(args[0].equals("produce") || args[0].equals("consume"))) {
            System.err.println("usage: JavaClient produce|consume --service-url URL --topic T [flags]");
            System.exit(2);
        }
        Map<String, String> flags;
        try {
            flags = parseFlags(args);
        } catch (IllegalArgumentException e) {
            emit("FATAL " + oneLine(e.getMessage()));
            System.exit(2);
            return;
        }
        JavaClient jc = new JavaClient(flags);
        Runtime.getRuntime().addShutdownHook(new Thread(jc::shutdownHook, "shutdown"));
        Thread stdin = new Thread(jc::watchStdin, "stdin");
        stdin.setDaemon(true);
        stdin.start();
        try {
            if (args[0].equals("produce")) {
                jc.produce();
            } else {
                jc.consume();
            }
        } catch (Exception e) {
            emit("FATAL " + oneLine(e.toString()));
            jc.status = 1;
        } finally {
            jc.finished.countDown();
        }
        OUT.flush();
        // Pulsar's client leaves non-daemon threads behind after close.
        Runtime.getRuntime().halt(jc.status);
    }

    static Map<String, String> parseFlags(String[] args) {
        Map<String, String> m = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + a);
            }
            String name = a.substring(2);
            String value;
            int eq = name.indexOf('=');
            if (eq >= 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            } else if (i + 1 < args.length) {
                value = args[++i];
            } else {
                throw new IllegalArgumentException("flag --" + name + " needs a value");
            }
            m.put(name, value);
        }
        return m;
    }

    private String flag(String name, String def) {
        return flags.getOrDefault(name, def);
    }

    private String required(String name) {
        String v = flags.get(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("flag --" + name + " is required");
        }
        return v;
    }

    private long number(String name, long def) {
        String v = flags.get(name);
        if (v == null) {
            return def;
        }
        try {
            return Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("flag --" + name + ": not a number: " + v);
        }
    }

    /**
     * Builds the client: through ControlledClusterFailover when --provider-url is set (the
     * service URL is then its default until the endpoint names another), else on --service-url.
     * Returns the client and starts a thread that prints a URL line whenever the URL in use
     * changes.
     */
    private PulsarClient buildClient() throws IOException {
        String serviceUrl = required("service-url");
        ClientBuilder b = PulsarClient.builder()
                .operationTimeout((int) number("operation-timeout-ms", 30_000), TimeUnit.MILLISECONDS);
        Supplier<String> current;
        String provider = flag("provider-url", "");
        if (provider.isEmpty()) {
            b.serviceUrl(serviceUrl);
            current = () -> serviceUrl;
        } else {
            Map<String, String> header = new HashMap<>();
            String token = flag("provider-token", "");
            if (!token.isEmpty()) {
                header.put("Authorization", "Bearer " + token);
            }
            ServiceUrlProvider failover = ControlledClusterFailover.builder()
                    .defaultServiceUrl(serviceUrl)
                    .urlProvider(provider)
                    .urlProviderHeader(header)
                    .checkInterval(number("check-interval-ms", 1_000), TimeUnit.MILLISECONDS)
                    .build();
            b.serviceUrlProvider(failover);
            current = failover::getServiceUrl;
        }
        String authPlugin = flag("auth-plugin", "");
        if (!authPlugin.isEmpty()) {
            b.authentication(authPlugin, flag("auth-params", ""));
        }
        String trust = flag("tls-trust-certs-file", "");
        if (!trust.isEmpty()) {
            b.tlsTrustCertsFilePath(trust);
        }
        PulsarClient client = b.build();
        Thread watch = new Thread(() -> watchUrl(current), "url-watch");
        watch.setDaemon(true);
        watch.start();
        return client;
    }

    /** Prints the service URL at start and each time it changes (polled every 10 ms). */
    private void watchUrl(Supplier<String> current) {
        String last = null;
        while (stopping.getCount() > 0) {
            String now = current.get();
            if (now != null && !now.equals(last)) {
                emit("URL " + System.currentTimeMillis() + " " + now);
                last = now;
            }
            try {
                stopping.await(10, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    private void produce() throws Exception {
        String topic = required("topic");
        String name = flag("name", "p");
        String key = flag("key", "");
        long count = number("count", 0);
        long rate = number("rate", 100);
        if (rate <= 0) {
            throw new IllegalArgumentException("flag --rate must be above 0");
        }
        boolean batching = Boolean.parseBoolean(flag("batching", "true"));
        try (PulsarClient client = buildClient();
             Producer<byte[]> producer = client.newProducer()
                     .topic(topic)
                     .enableBatching(batching)
                     .sendTimeout((int) number("send-timeout-ms", 30_000), TimeUnit.MILLISECONDS)
                     .blockIfQueueFull(true)
                     .create()) {
            emit("READY");
            AtomicLong acked = new AtomicLong();
            AtomicLong failed = new AtomicLong();
            long sent = 0;
            long periodNanos = TimeUnit.SECONDS.toNanos(1) / rate;
            long next = System.nanoTime();
            while (stopping.getCount() > 0 && (count == 0 || sent < count)) {
                long seq = sent;
                TypedMessageBuilder<byte[]> m = producer.newMessage()
                        .value(String.format("%s-%06d", name, seq).getBytes(StandardCharsets.UTF_8));
                if (!key.isEmpty()) {
                    m.key(key);
                }
                m.sendAsync().whenComplete((id, err) -> {
                    if (err == null) {
                        acked.incrementAndGet();
                        emit("ACK " + seq + " " + id);
                    } else {
                        failed.incrementAndGet();
                        emit("ERR " + seq + " " + oneLine(err.toString()));
                    }
                });
                sent++;
                next += periodNanos;
                long wait = next - System.nanoTime();
                if (wait > 0) {
                    stopping.await(wait, TimeUnit.NANOSECONDS);
                }
            }
            // Every send completes (acknowledged or failed by the send timeout) before DONE.
            producer.flush();
            long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(1);
            while (acked.get() + failed.get() < sent && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            emit("DONE " + sent + " " + acked.get() + " " + failed.get());
        }
    }

    private void consume() throws Exception {
        String topic = required("topic");
        SubscriptionType type;
        try {
            type = SubscriptionType.valueOf(flag("type", "Shared"));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("flag --type: not a subscription type: " + flag("type", ""));
        }
        try (PulsarClient client = buildClient();
             Consumer<byte[]> consumer = client.newConsumer()
                     .topic(topic)
                     .subscriptionName(required("subscription"))
                     .subscriptionType(type)
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                     .replicateSubscriptionState(true)
                     .subscribe()) {
            emit("READY");
            long received = 0;
            while (stopping.getCount() > 0) {
                Message<byte[]> m = consumer.receive(100, TimeUnit.MILLISECONDS);
                if (m == null) {
                    continue;
                }
                String from = m.getReplicatedFrom();
                emit("MSG " + new String(m.getValue(), StandardCharsets.UTF_8) + " " + m.getMessageId()
                        + " " + (from == null || from.isEmpty() ? "-" : from));
                consumer.acknowledgeAsync(m);
                received++;
            }
            emit("DONE " + received + " " + received + " " + received);
        }
    }

    /** Stops the run when standard input reaches its end. */
    private void watchStdin() {
        InputStream in = System.in;
        byte[] buf = new byte[256];
        try {
            while (in.read(buf) >= 0) {
                // input is ignored; only its end matters
            }
        } catch (IOException e) {
            // treated as the end of input
        }
        stopping.countDown();
    }

    /**
     * On SIGTERM: stop, let the run flush and print DONE, then exit with its status (0 after a
     * clean stop) rather than the JVM's 143 for the signal.
     */
    private void shutdownHook() {
        stopping.countDown();
        boolean done = false;
        try {
            done = finished.await(70, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        OUT.flush();
        if (done) {
            Runtime.getRuntime().halt(status);
        }
    }

    private static String oneLine(String s) {
        return s == null ? "" : s.replace('\n', ' ').replace('\r', ' ');
    }

    private static void emit(String line) {
        synchronized (OUT) {
            OUT.println(line);
            OUT.flush();
        }
    }
}
