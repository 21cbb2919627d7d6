package io.magnetar.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.policies.data.AuthAction;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.ClusterData;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;

class AdminTest extends ClientTest {
    String namespace() throws Exception {
        String ns = "public/" + unique("ns");
        admin.namespaces().createNamespace(ns);
        return ns;
    }

    @Test
    void clusters() throws Exception {
        assertTrue(admin.clusters().getClusters().contains("standalone"));
        ClusterData cd = admin.clusters().getCluster("standalone");
        assertNotNull(cd.getBrokerServiceUrl());
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.clusters().getCluster("no-such-cluster"));
    }

    @Test
    void tenants() throws Exception {
        String tenant = unique("tenant");
        admin.tenants().createTenant(tenant, TenantInfo.builder()
                .adminRoles(Set.of("alice")).allowedClusters(Set.of("standalone")).build());
        assertTrue(admin.tenants().getTenants().contains(tenant));
        assertEquals(Set.of("alice"), admin.tenants().getTenantInfo(tenant).getAdminRoles());
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().createTenant(tenant,
                TenantInfo.builder().allowedClusters(Set.of("standalone")).build()));
        admin.tenants().updateTenant(tenant, TenantInfo.builder()
                .adminRoles(Set.of("bob")).allowedClusters(Set.of("standalone")).build());
        assertEquals(Set.of("bob"), admin.tenants().getTenantInfo(tenant).getAdminRoles());
        admin.namespaces().createNamespace(tenant + "/ns");
        assertEquals(List.of(tenant + "/ns"), admin.namespaces().getNamespaces(tenant));
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().deleteTenant(tenant));
        admin.namespaces().deleteNamespace(tenant + "/ns");
        admin.tenants().deleteTenant(tenant);
        assertFalse(admin.tenants().getTenants().contains(tenant));
    }

    @Test
    void namespacePolicies() throws Exception {
        String ns = namespace();
        admin.namespaces().setRetention(ns, new RetentionPolicies(60, 10));
        RetentionPolicies r = admin.namespaces().getRetention(ns);
        assertEquals(60, r.getRetentionTimeInMinutes());
        assertEquals(10, r.getRetentionSizeInMB());

        admin.namespaces().setNamespaceMessageTTL(ns, 3600);
        assertEquals(3600, admin.namespaces().getNamespaceMessageTTL(ns));

        admin.namespaces().setDeduplicationStatus(ns, true);
        assertTrue(admin.namespaces().getDeduplicationStatus(ns));

        admin.namespaces().setBacklogQuota(ns, BacklogQuota.builder().limitSize(10 << 20)
                .retentionPolicy(BacklogQuota.RetentionPolicy.producer_request_hold).build());
        BacklogQuota q = admin.namespaces().getBacklogQuotaMap(ns).get(BacklogQuota.BacklogQuotaType.destination_storage);
        assertEquals(10 << 20, q.getLimitSize());
        assertEquals(BacklogQuota.RetentionPolicy.producer_request_hold, q.getPolicy());
        admin.namespaces().removeBacklogQuota(ns);
        assertFalse(admin.namespaces().getBacklogQuotaMap(ns).containsKey(BacklogQuota.BacklogQuotaType.destination_storage));

        admin.namespaces().grantPermissionOnNamespace(ns, "alice", EnumSet.of(AuthAction.produce, AuthAction.consume));
        assertEquals(EnumSet.of(AuthAction.produce, AuthAction.consume), admin.namespaces().getPermissions(ns).get("alice"));
        admin.namespaces().revokePermissionsOnNamespace(ns, "alice");
        assertFalse(admin.namespaces().getPermissions(ns).containsKey("alice"));

        var policies = admin.namespaces().getPolicies(ns);
        assertEquals(3600, policies.message_ttl_in_seconds);
        assertTrue(policies.deduplicationEnabled);
        admin.namespaces().deleteNamespace(ns);
        assertFalse(admin.namespaces().getNamespaces("public").contains(ns));
    }

    @Test
    void topicLifecycle() throws Exception {
        String ns = namespace();
        String part = "persistent://" + ns + "/part";
        String plain = "persistent://" + ns + "/plain";
        admin.topics().createPartitionedTopic(part, 3);
        admin.topics().createNonPartitionedTopic(plain);
        assertEquals(3, admin.topics().getPartitionedTopicMetadata(part).partitions);
        assertEquals(0, admin.topics().getPartitionedTopicMetadata(plain).partitions);
        assertEquals(List.of(part), admin.topics().getPartitionedTopicList(ns));
        assertTrue(admin.topics().getList(ns).contains(plain));
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.topics().createNonPartitionedTopic(plain));
        admin.topics().updatePartitionedTopic(part, 4);
        assertEquals(4, admin.topics().getPartitionedTopicMetadata(part).partitions);

        produce(part, "m", 8);
        assertEquals(8, admin.topics().getPartitionedStats(part, false).getMsgInCounter());

        admin.topics().deletePartitionedTopic(part);
        admin.topics().delete(plain);
        assertFalse(admin.topics().getList(ns).contains(plain));
        assertTrue(admin.topics().getPartitionedTopicList(ns).isEmpty());
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.topics().getStats(plain));
    }

    @Test
    void statsAndInternalStats() throws Exception {
        String t = topic();
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("sub").consumerName("c1").subscribe()) {
            produce(t, "m", 5);
            receive(c, 5, true);
            eventually(Duration.ofSeconds(10), quietly(() -> backlog(t, "sub") == 0));
            TopicStats s = admin.topics().getStats(t);
            assertEquals(5, s.getMsgInCounter());
            assertEquals(1, s.getSubscriptions().get("sub").getConsumers().size());
            assertEquals("c1", s.getSubscriptions().get("sub").getConsumers().get(0).getConsumerName());
            PersistentTopicInternalStats is = admin.topics().getInternalStats(t);
            assertEquals(5, is.numberOfEntries);
            assertFalse(is.ledgers.isEmpty());
            assertTrue(is.cursors.containsKey("sub"));
        }
    }

    @Test
    void subscriptions() throws Exception {
        String t = topic();
        produce(t, "m", 10);
        admin.topics().createSubscription(t, "from-start", MessageId.earliest);
        admin.topics().createSubscription(t, "from-end", MessageId.latest);
        assertEquals(Set.of("from-start", "from-end"), Set.copyOf(admin.topics().getSubscriptions(t)));
        assertEquals(10, backlog(t, "from-start"));
        assertEquals(0, backlog(t, "from-end"));

        admin.topics().skipMessages(t, "from-start", 3);
        assertEquals(7, backlog(t, "from-start"));
        try (Consumer<byte[]> c = client.newConsumer().topic(t).subscriptionName("from-start").subscribe()) {
            assertTexts(List.of("m3"), receive(c, 1, false));
        }
        admin.topics().skipAllMessages(t, "from-start");
        assertEquals(0, backlog(t, "from-start"));

        admin.topics().resetCursor(t, "from-end", MessageId.earliest);
        assertEquals(10, backlog(t, "from-end"));
        admin.topics().resetCursor(t, "from-end", System.currentTimeMillis() + 60_000);
        assertEquals(0, backlog(t, "from-end"));

        admin.topics().deleteSubscription(t, "from-end");
        assertEquals(List.of("from-start"), admin.topics().getSubscriptions(t));
    }

    @Test
    void peekAndExamine() throws Exception {
        String t = topic();
        MessageId second;
        try (Producer<byte[]> p = client.newProducer().topic(t).enableBatching(false).create()) {
            p.newMessage().key("k0").property("a", "b").value(bytes("m0")).send();
            second = p.send(bytes("m1"));
            p.send(bytes("m2"));
        }
        admin.topics().createSubscription(t, "sub", MessageId.earliest);
        List<Message<byte[]>> peeked = admin.topics().peekMessages(t, "sub", 2);
        assertEquals(List.of("m0", "m1"), texts(peeked));
        assertEquals("k0", peeked.get(0).getKey());
        assertEquals(Map.of("a", "b"), peeked.get(0).getProperties());
        assertEquals(3, backlog(t, "sub"), "peek must not move the cursor");

        assertEquals("m0", text(admin.topics().examineMessage(t, "earliest", 1)));
        assertEquals("m2", text(admin.topics().examineMessage(t, "latest", 1)));
        Message<byte[]> byId = admin.topics().getMessageById(t,
                ((org.apache.pulsar.client.impl.MessageIdImpl) second).getLedgerId(),
                ((org.apache.pulsar.client.impl.MessageIdImpl) second).getEntryId());
        assertEquals("m1", new String(byId.getData(), StandardCharsets.UTF_8));
        MessageId last = admin.topics().getLastMessageId(t);
        assertTrue(last.compareTo(second) > 0);
    }

    @Test
    void schemas() throws Exception {
        String t = topic();
        admin.topics().createNonPartitionedTopic(t);
        SchemaInfo info = Schema.JSON(SchemaTest.Order.class).getSchemaInfo();
        admin.schemas().createSchema(t, info);
        SchemaInfo got = admin.schemas().getSchemaInfo(t);
        assertEquals(SchemaType.JSON, got.getType());
        assertTrue(got.getSchemaDefinition().contains("price"));
        try (Producer<SchemaTest.Order> p = client.newProducer(Schema.JSON(SchemaTest.Order.class)).topic(t).create()) {
            p.send(new SchemaTest.Order(1, "x", 1));
        }
        admin.schemas().deleteSchema(t);
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.schemas().getSchemaInfo(t));
    }

    @Test
    void unloadAndTerminate() throws Exception {
        String t = topic();
        produce(t, "m", 2);
        admin.topics().unload(t);
        produce(t, "m", 1);
        MessageId last = admin.topics().terminateTopic(t);
        assertNotNull(last);
        assertThrows(org.apache.pulsar.client.api.PulsarClientException.TopicTerminatedException.class,
                () -> client.newProducer().topic(t).create());
    }
}
