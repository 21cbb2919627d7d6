package io.magnetar.functions;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import java.util.stream.Collectors;

import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.common.functions.Resources;
import org.apache.pulsar.common.io.ConnectorDefinition;
import org.apache.pulsar.common.io.SinkConfig;
import org.apache.pulsar.common.io.SourceConfig;
import org.apache.pulsar.common.policies.data.SinkStatus;
import org.apache.pulsar.common.policies.data.SourceStatus;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * Pulsar IO through the admin client's sources() and sinks(), with
 * Pulsar's own builtin connectors (4.0.8 NARs): the data-generator source
 * writes Person records (JSON schema) to a topic, and the JDBC PostgreSQL
 * sink writes them from that topic into the table person of the database
 * magnetar.jdbcUrl names (MAGNETAR_JDBC_URL; the sink test is skipped
 * without it).
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(300)
class ConnectorsTest extends FunctionsTestBase {
    static final String SOURCE = setting("magnetar.sourceConnector", "MAGNETAR_SOURCE_CONNECTOR", "data-generator");
    static final String SINK = setting("magnetar.sinkConnector", "MAGNETAR_SINK_CONNECTOR", "jdbc-postgres");

    String source;
    String persons;

    @Test
    @Order(1)
    void builtins() throws Exception {
        List<String> sources = admin.sources().getBuiltInSources().stream()
                .map(ConnectorDefinition::getName).collect(Collectors.toList());
        assertTrue(sources.contains(SOURCE), "builtin sources " + sources);
        List<String> sinks = admin.sinks().getBuiltInSinks().stream()
                .map(ConnectorDefinition::getName).collect(Collectors.toList());
        assertTrue(sinks.contains(SINK), "builtin sinks " + sinks);
        ConnectorDefinition def = admin.sinks().getBuiltInSinks().stream()
                .filter(d -> d.getName().equals(SINK)).findFirst().orElseThrow();
        assertNotNull(def.getSinkClass(), "sink class of " + def);
    }

    @Test
    @Order(2)
    void sourceWrites() throws Exception {
        source = unique("generator");
        persons = topic("persons");
        SourceConfig c = SourceConfig.builder()
                .tenant(tenant).namespace(namespace).name(source)
                .archive("builtin://" + SOURCE)
                .topicName(persons)
                .configs(Map.of("sleepBetweenMessages", "100"))
                .parallelism(1)
                .resources(Resources.builder().ram(RAM).build())
                .build();
        admin.sources().createSource(c, null);
        awaitSource(1);
        eventually(START, "source " + source + " wrote", () -> written() > 0, sourceStatus());

        try (Consumer<GenericRecord> in = client.newConsumer(Schema.AUTO_CONSUME()).topic(persons)
                .subscriptionName("check").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe()) {
            for (Message<GenericRecord> m : receive(in, 3)) {
                GenericRecord person = m.getValue();
                assertEquals(SchemaType.JSON, person.getSchemaType());
                assertNotNull(person.getField("username"), "username of " + person.getNativeObject());
                assertNotNull(person.getField("email"), "email of " + person.getNativeObject());
            }
        }
        assertEquals(SchemaType.JSON, admin.schemas().getSchemaInfo(persons).getType());
    }

    @Test
    @Order(3)
    void sourceReadBack() throws Exception {
        SourceConfig got = admin.sources().getSource(tenant, namespace, source);
        assertEquals(source, got.getName());
        assertEquals(persons, got.getTopicName());
        assertEquals("builtin://" + SOURCE, got.getArchive());
        assertEquals("100", String.valueOf(got.getConfigs().get("sleepBetweenMessages")));
        assertEquals(1, got.getParallelism());
        assertEquals(List.of(source), admin.sources().listSources(tenant, namespace));
        SourceStatus.SourceInstanceStatus.SourceInstanceStatusData one =
                admin.sources().getSourceStatus(tenant, namespace, source, 0);
        assertTrue(one.isRunning(), "instance 0: " + one);
        assertTrue(one.getNumReceivedFromSource() > 0, "instance 0: " + one);
    }

    @Test
    @Order(4)
    void sinkToPostgres() throws Exception {
        String jdbcUrl = setting("magnetar.jdbcUrl", "MAGNETAR_JDBC_URL", null);
        assumeTrue(jdbcUrl != null, "magnetar.jdbcUrl (MAGNETAR_JDBC_URL) is not set");
        String user = setting("magnetar.jdbcUser", "MAGNETAR_JDBC_USER", "postgres");
        String password = setting("magnetar.jdbcPassword", "MAGNETAR_JDBC_PASSWORD", "");

        String sink = unique("to-postgres");
        SinkConfig c = SinkConfig.builder()
                .tenant(tenant).namespace(namespace).name(sink)
                .archive("builtin://" + SINK)
                .inputs(List.of(persons))
                .sourceSubscriptionPosition(SubscriptionInitialPosition.Earliest)
                .configs(Map.of("jdbcUrl", jdbcUrl, "tableName", "person", "userName", user,
                        "password", password, "batchSize", 10, "timeoutMs", 500))
                .parallelism(1)
                .resources(Resources.builder().ram(RAM).build())
                .build();
        admin.sinks().createSink(c, null);
        Supplier<Object> status = () -> {
            try {
                return admin.sinks().getSinkStatus(tenant, namespace, sink);
            } catch (PulsarAdminException e) {
                return e;
            }
        };
        eventually(START, "rows in person", () -> rows(jdbcUrl, user, password) > 0, status);
        eventually(Duration.ofSeconds(30), "sink " + sink + " reports writes", () -> {
            SinkStatus st = admin.sinks().getSinkStatus(tenant, namespace, sink);
            return st.getNumRunning() == 1 && st.getInstances().get(0).getStatus().getNumWrittenToSink() > 0;
        }, status);
        SinkStatus.SinkInstanceStatus.SinkInstanceStatusData one = admin.sinks().getSinkStatus(tenant, namespace, sink, 0);
        assertTrue(one.getNumReadFromPulsar() > 0, "instance 0: " + one);
        assertEquals(0, one.getNumSinkExceptions(), "instance 0: " + one);

        SinkConfig got = admin.sinks().getSink(tenant, namespace, sink);
        assertEquals("builtin://" + SINK, got.getArchive());
        assertEquals(List.of(persons), List.copyOf(got.getInputs() != null ? got.getInputs() : got.getInputSpecs().keySet()));
        assertEquals("person", got.getConfigs().get("tableName"));
        assertEquals(List.of(sink), admin.sinks().listSinks(tenant, namespace));

        admin.sinks().deleteSink(tenant, namespace, sink);
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.sinks().getSink(tenant, namespace, sink));
        assertEquals(List.of(), admin.sinks().listSinks(tenant, namespace));
    }

    @Test
    @Order(5)
    void sourceStopStartDelete() throws Exception {
        admin.sources().stopSource(tenant, namespace, source);
        awaitSource(0);
        // The instance is gone, not only reported stopped: its producer left.
        eventually(START, "no producer on " + persons,
                () -> admin.topics().getStats(persons).getPublishers().isEmpty(), sourceStatus());
        admin.sources().startSource(tenant, namespace, source);
        awaitSource(1);
        eventually(START, "source " + source + " writes again", () -> written() > 0, sourceStatus());

        admin.sources().deleteSource(tenant, namespace, source);
        assertThrows(PulsarAdminException.NotFoundException.class,
                () -> admin.sources().getSource(tenant, namespace, source));
        assertEquals(List.of(), admin.sources().listSources(tenant, namespace));
    }

    void awaitSource(int running) throws InterruptedException {
        eventually(START, "source " + source + " has " + running + " running instances",
                () -> admin.sources().getSourceStatus(tenant, namespace, source).getNumRunning() == running,
                sourceStatus());
    }

    /** What the source's instance 0 has written (its counters start again with each start). */
    long written() throws PulsarAdminException {
        SourceStatus st = admin.sources().getSourceStatus(tenant, namespace, source);
        return st.getInstances().isEmpty() ? 0 : st.getInstances().get(0).getStatus().getNumWritten();
    }

    Supplier<Object> sourceStatus() {
        return () -> {
            try {
                return admin.sources().getSourceStatus(tenant, namespace, source);
            } catch (PulsarAdminException e) {
                return e;
            }
        };
    }

    static long rows(String url, String user, String password) throws Exception {
        try (Connection conn = DriverManager.getConnection(url, user, password);
             Statement s = conn.createStatement();
             ResultSet rs = s.executeQuery("select count(*) from person where username is not null")) {
            rs.next();
            return rs.getLong(1);
        }
    }
}
