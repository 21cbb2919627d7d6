package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class SchemaTest extends ClientTest {
    public static class Order {
        public int id;
        public String item;
        public double price;

        public Order() {}

        Order(int id, String item, double price) {
            this.id = id;
            this.item = item;
            this.price = price;
        }
    }

    public static class Other {
        public String name;
        public long count;
    }

    static Schema<Order> schema(String kind) {
        return kind.equals("json") ? Schema.JSON(Order.class) : Schema.AVRO(Order.class);
    }

    static String local(String t) {
        return t.substring(t.lastIndexOf('/') + 1);
    }

    @ParameterizedTest
    @ValueSource(strings = {"json", "avro"})
    void recordRoundTrip(String kind) throws Exception {
        String t = topic();
        try (Consumer<Order> c = client.newConsumer(schema(kind)).topic(t).subscriptionName("sub").subscribe();
             Producer<Order> p = client.newProducer(schema(kind)).topic(t).create()) {
            p.send(new Order(1, "book", 9.5));
            Message<Order> m = c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS);
            assertEquals(1, m.getValue().id);
            assertEquals("book", m.getValue().item);
            assertEquals(9.5, m.getValue().price);
            c.acknowledge(m);
        }
        SchemaInfo info = admin.schemas().getSchemaInfo(t);
        assertEquals(kind.equals("json") ? SchemaType.JSON : SchemaType.AVRO, info.getType());
        assertTrue(info.getSchemaDefinition().contains("item"));
    }

    @Test
    void autoConsume() throws Exception {
        String t = topic();
        try (Consumer<GenericRecord> c = client.newConsumer(Schema.AUTO_CONSUME()).topic(t).subscriptionName("sub").subscribe();
             Producer<Order> p = client.newProducer(Schema.AVRO(Order.class)).topic(t).create()) {
            p.send(new Order(2, "pen", 1.25));
            GenericRecord r = c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS).getValue();
            assertEquals("pen", r.getField("item").toString());
            assertEquals(2, r.getField("id"));
        }
    }

    @Test
    void stringAndPrimitives() throws Exception {
        String t = topic();
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(t).subscriptionName("sub").subscribe();
             Producer<String> p = client.newProducer(Schema.STRING).topic(t).create()) {
            p.send("héllo");
            assertEquals("héllo", c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS).getValue());
        }
        String t2 = topic();
        try (Consumer<Long> c = client.newConsumer(Schema.INT64).topic(t2).subscriptionName("sub").subscribe();
             Producer<Long> p = client.newProducer(Schema.INT64).topic(t2).create()) {
            p.send(42L);
            assertEquals(42L, c.receive(RECEIVE_SECONDS, TimeUnit.SECONDS).getValue());
        }
    }

    @Test
    void incompatibleSchemaRefused() throws Exception {
        String t = topic();
        try (Producer<Order> p = client.newProducer(Schema.AVRO(Order.class)).topic(t).create()) {
            p.send(new Order(1, "a", 1));
            assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                    () -> client.newProducer(Schema.AVRO(Other.class)).topic(t).create());
        }
    }

    @Test
    void schemaVersions() throws Exception {
        String t = topic();
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).create()) {
            p.send("x");
        }
        assertEquals(List.of(SchemaType.STRING), admin.schemas().getAllSchemas(t).stream().map(SchemaInfo::getType).toList());
    }
}
