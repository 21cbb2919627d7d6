package io.magnetar.functions;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.functions.FunctionConfig;
import org.apache.pulsar.common.functions.FunctionState;
import org.apache.pulsar.common.policies.data.FunctionStatus;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * A stateful function, WordCountFunction, whose counters are read with
 * getFunctionState (putFunctionState writes a value), and a function
 * created from a file: URL (createFunctionWithUrl), then updated to two
 * instances without a new package. Both are created before either is
 * waited on.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(300)
class FunctionUrlAndStateTest extends FunctionsTestBase {
    String byUrl;
    String urlInput;
    String wordCount;
    String sentences;

    @Test
    @Order(1)
    void createBoth() throws Exception {
        String jar = examplesJar();
        byUrl = unique("by-url");
        urlInput = topic("url-in");
        FunctionConfig c = function(byUrl, EXCLAMATION, urlInput, topic("url-out"), 1);
        admin.functions().createFunctionWithUrl(c, new File(jar).getAbsoluteFile().toURI().toString());

        wordCount = unique("words");
        sentences = topic("sentences");
        admin.functions().createFunction(function(wordCount, WORD_COUNT, sentences, null, 1), jar);

        assertEquals(Set.of(byUrl, wordCount), Set.copyOf(admin.functions().getFunctions(tenant, namespace)));
        awaitFunctionRunning(byUrl, 1);
        awaitFunctionRunning(wordCount, 1);
    }

    @Test
    @Order(2)
    void countsWords() throws Exception {
        awaitConsuming(wordCount, sentences);
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(sentences).create()) {
            for (String s : List.of("apple banana apple", "cherry apple", "banana apple pear", "apple")) {
                p.send(s);
            }
        }
        // apple 5, banana 2, cherry 1, pear 1
        eventually(Duration.ofSeconds(30), "state apple == 5",
                () -> Long.valueOf(5).equals(admin.functions().getFunctionState(tenant, namespace, wordCount, "apple").getNumberValue()),
                () -> quietState("apple"));
        FunctionState apple = admin.functions().getFunctionState(tenant, namespace, wordCount, "apple");
        assertEquals("apple", apple.getKey());
        assertEquals(2L, admin.functions().getFunctionState(tenant, namespace, wordCount, "banana").getNumberValue());
        assertEquals(1L, admin.functions().getFunctionState(tenant, namespace, wordCount, "pear").getNumberValue());
    }

    @Test
    @Order(3)
    void putsState() throws Exception {
        FunctionState put = new FunctionState("greeting", "hello, state", null, null, null);
        admin.functions().putFunctionState(tenant, namespace, wordCount, put);
        FunctionState got = admin.functions().getFunctionState(tenant, namespace, wordCount, "greeting");
        assertEquals("greeting", got.getKey());
        assertEquals("hello, state", got.getStringValue());
        assertNull(got.getNumberValue());

        // A key never written: 404.
        assertAdminError(404, null, () -> admin.functions().getFunctionState(tenant, namespace, wordCount, "no-such-key"));
        // The counters are still there.
        assertTrue(admin.functions().getFunctionState(tenant, namespace, wordCount, "apple").getNumberValue() >= 5);
        admin.functions().deleteFunction(tenant, namespace, wordCount);
    }

    @Test
    @Order(4)
    void createdFromUrlThenScaled() throws Exception {
        FunctionConfig got = admin.functions().getFunction(tenant, namespace, byUrl);
        assertEquals(EXCLAMATION, got.getClassName());
        assertEquals(Set.of(urlInput), inputTopics(got));
        awaitConsuming(byUrl, urlInput);
        assertEquals("url!", admin.functions().triggerFunction(tenant, namespace, byUrl, null, "url", null));

        // No new package: the one fetched from the URL stays.
        admin.functions().updateFunction(function(byUrl, EXCLAMATION, urlInput, topic("url-out"), 2), null);
        assertEquals(2, admin.functions().getFunction(tenant, namespace, byUrl).getParallelism());
        awaitFunctionRunning(byUrl, 2);
        FunctionStatus st = admin.functions().getFunctionStatus(tenant, namespace, byUrl);
        assertEquals(2, st.getNumInstances());
        assertEquals(Set.of(0, 1), st.getInstances().stream().map(i -> i.getInstanceId()).collect(Collectors.toSet()));
        assertTrue(admin.functions().getFunctionStatus(tenant, namespace, byUrl, 1).isRunning());
        assertEquals(2, admin.functions().getFunctionStats(tenant, namespace, byUrl).getInstances().size());
        assertEquals("two!", admin.functions().triggerFunction(tenant, namespace, byUrl, null, "two", null));

        admin.functions().deleteFunction(tenant, namespace, byUrl);
        assertEquals(List.of(), admin.functions().getFunctions(tenant, namespace));
    }

    Object quietState(String key) {
        try {
            return admin.functions().getFunctionState(tenant, namespace, wordCount, key);
        } catch (Exception e) {
            return e;
        }
    }
}
