package io.magnetar.functions;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.common.functions.FunctionConfig;
import org.apache.pulsar.common.policies.data.FunctionInstanceStatsData;
import org.apache.pulsar.common.policies.data.FunctionStats;
import org.apache.pulsar.common.policies.data.FunctionStatus;
import org.apache.pulsar.common.policies.data.FunctionStatus.FunctionInstanceStatus.FunctionInstanceStatusData;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * One Java function (ExclamationFunction from Pulsar's examples jar,
 * uploaded with createFunction) through its whole life, in order: create,
 * process, read back, trigger, stop and start, restart, delete.
 * (FunctionUrlAndStateTest scales a function to two instances, meanwhile.)
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(300)
class FunctionLifecycleTest extends FunctionsTestBase {
    static final int N = 20;

    String name;
    String input;
    String output;

    @Test
    @Order(1)
    void create() throws Exception {
        String jar = examplesJar();
        name = unique("exclaim");
        input = topic("exclaim-in");
        output = topic("exclaim-out");
        FunctionConfig config = function(name, EXCLAMATION, input, output, 1);
        admin.functions().createFunction(config, jar);

        // A name that exists: 400 (not 409), a plain PulsarAdminException.
        PulsarAdminException dup = assertAdminError(400, "already exists",
                () -> admin.functions().createFunction(config, jar));
        assertFalse(dup instanceof PulsarAdminException.ConflictException, "a ConflictException: " + dup);

        awaitFunctionRunning(name, 1);
        FunctionStatus st = admin.functions().getFunctionStatus(tenant, namespace, name);
        assertEquals(1, st.getNumInstances());
        assertEquals(1, st.getInstances().size());
        assertEquals(0, st.getInstances().get(0).getInstanceId());
    }

    @Test
    @Order(2)
    void processes() throws Exception {
        awaitSubscribed();
        try (Consumer<String> out = client.newConsumer(Schema.STRING).topic(output)
                .subscriptionName("check").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe();
             Producer<String> p = client.newProducer(Schema.STRING).topic(input).create()) {
            Set<String> want = new HashSet<>();
            for (int i = 0; i < N; i++) {
                p.send("hello-" + i);
                want.add("hello-" + i + "!");
            }
            Set<String> got = new HashSet<>();
            for (Message<String> m : receive(out, N)) {
                got.add(m.getValue());
            }
            assertEquals(want, got);
        }

        eventually(Duration.ofSeconds(20), "processedSuccessfullyTotal >= " + N,
                () -> admin.functions().getFunctionStats(tenant, namespace, name).getProcessedSuccessfullyTotal() >= N,
                () -> stats());
        FunctionStats stats = admin.functions().getFunctionStats(tenant, namespace, name);
        assertTrue(stats.getReceivedTotal() >= N, "receivedTotal " + stats.getReceivedTotal());
        assertEquals(0, stats.getUserExceptionsTotal());
        assertEquals(1, stats.getInstances().size());
        FunctionInstanceStatsData one = admin.functions().getFunctionStats(tenant, namespace, name, 0);
        assertTrue(one.getProcessedSuccessfullyTotal() >= N, "instance 0 processed " + one.getProcessedSuccessfullyTotal());

        FunctionInstanceStatusData inst = admin.functions().getFunctionStatus(tenant, namespace, name, 0);
        assertTrue(inst.isRunning(), "instance 0 not running: " + inst);
        assertTrue(inst.getNumReceived() >= N, "instance 0 received " + inst.getNumReceived());
        assertTrue(inst.getNumSuccessfullyProcessed() >= N, "instance 0 processed " + inst.getNumSuccessfullyProcessed());
        assertEquals(0, inst.getNumUserExceptions());
        assertNotNull(inst.getWorkerId());
    }

    @Test
    @Order(3)
    void readBack() throws Exception {
        FunctionConfig got = admin.functions().getFunction(tenant, namespace, name);
        assertEquals(tenant, got.getTenant());
        assertEquals(namespace, got.getNamespace());
        assertEquals(name, got.getName());
        assertEquals(EXCLAMATION, got.getClassName());
        assertEquals(Set.of(input), inputTopics(got));
        assertEquals(output, got.getOutput());
        assertEquals(1, got.getParallelism());
        assertEquals(FunctionConfig.Runtime.JAVA, got.getRuntime());
        assertNotNull(got.getResources());
        assertEquals(RAM, got.getResources().getRam());

        assertEquals(List.of(name), admin.functions().getFunctions(tenant, namespace));
    }

    @Test
    @Order(4)
    void trigger() throws Exception {
        assertEquals("x!", admin.functions().triggerFunction(tenant, namespace, name, null, "x", null));
        assertEquals("y!", admin.functions().triggerFunction(tenant, namespace, name, input, "y", null));
    }

    @Test
    @Order(5)
    void stopAndStart() throws Exception {
        admin.functions().stopFunction(tenant, namespace, name);
        awaitFunctionRunning(name, 0);
        FunctionStatus st = admin.functions().getFunctionStatus(tenant, namespace, name);
        assertEquals(1, st.getNumInstances());
        assertFalse(st.getInstances().get(0).getStatus().isRunning());
        // The instance is gone, not only reported stopped: its consumer left.
        eventually(START, "no consumer on " + input, () -> consumers(input) == 0, functionStatus(name));

        admin.functions().startFunction(tenant, namespace, name);
        awaitFunctionRunning(name, 1);
        awaitSubscribed();
        assertEquals("after-start!", admin.functions().triggerFunction(tenant, namespace, name, null, "after-start", null));
    }

    @Test
    @Order(6)
    void restart() throws Exception {
        long before = admin.functions().getFunctionStatus(tenant, namespace, name, 0).getNumReceived();
        assertTrue(before > 0, "instance 0 received " + before);
        admin.functions().restartFunction(tenant, namespace, name, 0);
        // A new process: running, its counters from zero.
        eventually(START, "instance 0 restarted", () -> {
            FunctionInstanceStatusData s = admin.functions().getFunctionStatus(tenant, namespace, name, 0);
            return s.isRunning() && s.getNumReceived() < before;
        }, functionStatus(name));
        awaitSubscribed();
        assertEquals("after-restart!",
                admin.functions().triggerFunction(tenant, namespace, name, null, "after-restart", null));
    }

    @Test
    @Order(7)
    void delete() throws Exception {
        admin.functions().deleteFunction(tenant, namespace, name);
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.functions().getFunction(tenant, namespace, name));
        assertEquals(List.of(), admin.functions().getFunctions(tenant, namespace));
        // Its subscription goes with it (cleanupSubscription defaults to true).
        eventually(Duration.ofSeconds(30), "no subscription on " + input,
                () -> admin.topics().getSubscriptions(input).isEmpty(), null);
    }

    void awaitSubscribed() throws InterruptedException {
        awaitConsuming(name, input);
    }

    Object stats() {
        try {
            return admin.functions().getFunctionStats(tenant, namespace, name);
        } catch (PulsarAdminException e) {
            return e;
        }
    }
}
