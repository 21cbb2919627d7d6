package io.magnetar.functions;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.common.functions.FunctionConfig;
import org.apache.pulsar.common.functions.Resources;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.function.Executable;

/**
 * Base of every test class: one admin client and one client per class,
 * connected to the broker named by the system property magnetar.adminUrl
 * (or MAGNETAR_ADMIN_URL) and magnetar.serviceUrl (or MAGNETAR_SERVICE_URL),
 * and a namespace of its own, deleted with what is left in it at the end.
 * Without the admin URL every test is skipped. The other settings are
 * read by {@link #setting}; see pom.xml for the list.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class FunctionsTestBase {
    /** Bound for one receive; a test that waits longer has failed. */
    static final int RECEIVE_SECONDS = 20;
    /** How long an instance may take to start: a JVM each, on a busy 2-core machine. */
    static final Duration START = Duration.ofSeconds(120);
    /** 256 MiB, the heap of each instance. */
    static final long RAM = 256L << 20;

    static final String EXCLAMATION = "org.apache.pulsar.functions.api.examples.ExclamationFunction";
    static final String WORD_COUNT = "org.apache.pulsar.functions.api.examples.WordCountFunction";

    PulsarAdmin admin;
    PulsarClient client;
    String tenant = "public";
    String namespace;

    static String setting(String property, String env, String def) {
        String v = System.getProperty(property);
        if (v == null || v.isEmpty()) {
            v = System.getenv(env);
        }
        return v == null || v.isEmpty() ? def : v;
    }

    static String adminUrl() {
        return setting("magnetar.adminUrl", "MAGNETAR_ADMIN_URL", null);
    }

    static String serviceUrl() {
        return setting("magnetar.serviceUrl", "MAGNETAR_SERVICE_URL", null);
    }

    /** The pulsar-functions-api-examples jar; tests that run a function are skipped without it. */
    static String examplesJar() {
        String jar = setting("magnetar.examplesJar", "MAGNETAR_FUNCTIONS_EXAMPLES", null);
        assumeTrue(jar != null, "magnetar.examplesJar (MAGNETAR_FUNCTIONS_EXAMPLES) is not set");
        assumeTrue(new File(jar).isFile(), "no examples jar at " + jar);
        return jar;
    }

    @BeforeAll
    void connect() throws Exception {
        String http = adminUrl();
        String service = serviceUrl();
        assumeTrue(http != null && service != null, "magnetar.adminUrl and magnetar.serviceUrl are not set");
        admin = PulsarAdmin.builder().serviceHttpUrl(http)
                .requestTimeout(60, TimeUnit.SECONDS).build();
        client = PulsarClient.builder().serviceUrl(service)
                .operationTimeout(30, TimeUnit.SECONDS).build();
        namespace = unique("fn");
        admin.namespaces().createNamespace(tenant + "/" + namespace);
    }

    @AfterAll
    void close() throws Exception {
        if (admin != null && namespace != null) {
            // What a failed test left behind: its instances must not outlive the suite.
            for (String f : quietList(() -> admin.functions().getFunctions(tenant, namespace))) {
                quietly(() -> admin.functions().deleteFunction(tenant, namespace, f));
            }
            for (String s : quietList(() -> admin.sources().listSources(tenant, namespace))) {
                quietly(() -> admin.sources().deleteSource(tenant, namespace, s));
            }
            for (String s : quietList(() -> admin.sinks().listSinks(tenant, namespace))) {
                quietly(() -> admin.sinks().deleteSink(tenant, namespace, s));
            }
        }
        if (client != null) {
            client.close();
        }
        if (admin != null) {
            admin.close();
        }
    }

    interface ListCall {
        List<String> get() throws Exception;
    }

    static List<String> quietList(ListCall c) {
        try {
            return c.get();
        } catch (Exception e) {
            return List.of();
        }
    }

    static void quietly(Executable e) {
        try {
            e.execute();
        } catch (Throwable ignored) {
            // best effort cleanup
        }
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    String topic(String name) {
        return "persistent://" + tenant + "/" + namespace + "/" + name;
    }

    /** A Java function config: one input, the given output (or none), 256 MiB. */
    FunctionConfig function(String name, String className, String input, String output, int parallelism) {
        FunctionConfig c = new FunctionConfig();
        c.setTenant(tenant);
        c.setNamespace(namespace);
        c.setName(name);
        c.setClassName(className);
        c.setRuntime(FunctionConfig.Runtime.JAVA);
        c.setInputs(List.of(input));
        c.setOutput(output);
        c.setParallelism(parallelism);
        c.setResources(Resources.builder().ram(RAM).build());
        return c;
    }

    /** The input topics a config names, as inputs or as inputSpecs keys. */
    static Set<String> inputTopics(FunctionConfig c) {
        Set<String> out = new TreeSet<>();
        if (c.getInputs() != null) {
            out.addAll(c.getInputs());
        }
        if (c.getInputSpecs() != null) {
            out.addAll(c.getInputSpecs().keySet());
        }
        return out;
    }

    /** A check that may throw; a throw counts as "not yet". */
    interface Check {
        boolean get() throws Exception;
    }

    /**
     * Polls cond every 250 ms until it holds; fails after timeout with what
     * state describes (the last status, say) and the last exception.
     */
    static void eventually(Duration timeout, String what, Check cond, Supplier<Object> state)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        Exception last = null;
        while (true) {
            try {
                if (cond.get()) {
                    return;
                }
                last = null;
            } catch (Exception e) {
                last = e;
            }
            if (System.nanoTime() > deadline) {
                Object s;
                try {
                    s = state == null ? null : state.get();
                } catch (RuntimeException e) {
                    s = e;
                }
                fail(what + ": not after " + timeout + "; state: " + s
                        + (last == null ? "" : "; last error: " + last));
            }
            Thread.sleep(250);
        }
    }

    /** The status of a function, for failure messages. */
    Supplier<Object> functionStatus(String name) {
        return () -> {
            try {
                return admin.functions().getFunctionStatus(tenant, namespace, name);
            } catch (PulsarAdminException e) {
                return e;
            }
        };
    }

    /** Waits until running instances of function name number n. */
    void awaitFunctionRunning(String name, int n) throws InterruptedException {
        eventually(START, "function " + name + " has " + n + " running instances",
                () -> admin.functions().getFunctionStatus(tenant, namespace, name).getNumRunning() == n,
                functionStatus(name));
    }

    /**
     * Waits until a consumer of function name is on topic: a function reads
     * its inputs from the latest message, so what is sent before is not seen.
     */
    void awaitConsuming(String name, String topic) throws InterruptedException {
        eventually(START, "function " + name + " consumes " + topic, () -> consumers(topic) >= 1,
                functionStatus(name));
    }

    /** The consumers on topic, over all its subscriptions. */
    int consumers(String topic) throws PulsarAdminException {
        return admin.topics().getStats(topic).getSubscriptions().values().stream()
                .mapToInt(s -> s.getConsumers().size()).sum();
    }

    /** Asserts that call fails with status code and a message that contains text. */
    static PulsarAdminException assertAdminError(int code, String text, Executable call) {
        PulsarAdminException e = assertThrows(PulsarAdminException.class, call);
        assertEquals(code, e.getStatusCode(), () -> "status code of " + e);
        if (text != null && (e.getMessage() == null || !e.getMessage().contains(text))) {
            fail("message of " + e + " (" + e.getStatusCode() + ") does not contain \"" + text + "\"");
        }
        return e;
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Receives n messages and acknowledges them. */
    static <T> List<Message<T>> receive(Consumer<T> c, int n) throws PulsarClientException {
        List<Message<T>> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            Message<T> m = c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS);
            assertNotNull(m, "message " + i + " of " + n + " not received in " + RECEIVE_SECONDS + "s");
            c.acknowledge(m);
            out.add(m);
        }
        return out;
    }

    static List<String> sorted(Collection<String> in) {
        List<String> out = new ArrayList<>(in);
        out.sort(null);
        return out;
    }
}
