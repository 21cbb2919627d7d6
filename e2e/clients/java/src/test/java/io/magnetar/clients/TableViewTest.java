package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.TableView;
import org.junit.jupiter.api.Test;

class TableViewTest extends ClientTest {
    @Test
    void latestValuePerKey() throws Exception {
        String t = topic();
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).create()) {
            p.newMessage().key("a").value("v1").send();
            p.newMessage().key("b").value("v1").send();
            p.newMessage().key("a").value("v2").send();
            try (TableView<String> tv = client.newTableView(Schema.STRING).topic(t).create()) {
                Map<String, String> all = new HashMap<>();
                tv.forEach(all::put);
                assertEquals(Map.of("a", "v2", "b", "v1"), all);
            }
            try (TableView<String> tv = client.newTableView(Schema.STRING).topic(t).create()) {
                Map<String, String> seen = new ConcurrentHashMap<>();
                tv.forEachAndListen(seen::put);
                p.newMessage().key("c").value("v3").send();
                eventually(Duration.ofSeconds(10), () -> "v3".equals(tv.get("c")) && "v3".equals(seen.get("c")));
                // A null value deletes the key.
                p.newMessage().key("a").value(null).send();
                eventually(Duration.ofSeconds(10), () -> !tv.containsKey("a"));
            }
        }
    }

    @Test
    void partitioned() throws Exception {
        String t = topic();
        admin.topics().createPartitionedTopic(t, 2);
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).enableBatching(false).create()) {
            for (int i = 0; i < 10; i++) {
                p.newMessage().key("k" + (i % 5)).value("v" + i).send();
            }
        }
        try (TableView<String> tv = client.newTableView(Schema.STRING).topic(t).create()) {
            eventually(Duration.ofSeconds(10), () -> tv.size() == 5);
            for (int i = 0; i < 5; i++) {
                assertEquals("v" + (i + 5), tv.get("k" + i));
            }
        }
    }
}
