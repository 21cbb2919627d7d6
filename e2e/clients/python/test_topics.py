"""Partitioned topics, multi-topic and pattern subscriptions, non-persistent
topics."""

import re

import pulsar
import pytest

from clientutil import TIMEOUT_MS, assert_no_message, receive_all, unique


def test_partitioned_topic(client, admin, topic):
    admin.create_partitioned_topic(topic, 3)
    assert client.get_topic_partitions(topic) == ["%s-partition-%d" % (topic, i) for i in range(3)]
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
                               batching_enabled=False)
    n = 30
    for i in range(n):
        p.send(b"%d" % i)
    got = receive_all(c, n)
    assert sorted(int(m.data()) for m in got) == list(range(n))
    parts = {m.topic_name() for m in got}
    assert parts == {"%s-partition-%d" % (topic, i) for i in range(3)}


def test_partitioned_key_routing(client, admin, topic):
    admin.create_partitioned_topic(topic, 4)
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        p.send(b"%d" % i, partition_key="k%d" % (i % 3))
    where = {}
    for m in receive_all(c, 20):
        # One key, one partition.
        assert where.setdefault(m.partition_key(), m.topic_name()) == m.topic_name()


def test_partitioned_custom_router(client, admin, topic):
    admin.create_partitioned_topic(topic, 2)
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, message_router=lambda msg, n: 1)
    for i in range(5):
        p.send(b"%d" % i)
    for m in receive_all(c, 5):
        assert m.topic_name() == topic + "-partition-1"


def test_multi_topic_subscription(client):
    topics = ["persistent://public/default/" + unique("multi") for _ in range(3)]
    c = client.subscribe(topics, "sub")
    for i, t in enumerate(topics):
        p = client.create_producer(t)
        p.send(b"from-%d" % i)
        p.close()
    got = receive_all(c, 3)
    assert sorted(m.data() for m in got) == [b"from-0", b"from-1", b"from-2"]
    assert {m.topic_name() for m in got} == set(topics)


def test_pattern_subscription(client):
    prefix = unique("pat")
    for name in ("a", "b"):
        client.create_producer("persistent://public/default/%s-%s" % (prefix, name)).send(name.encode())
    client.create_producer("persistent://public/default/other-" + prefix).send(b"no")
    c = client.subscribe(re.compile("persistent://public/default/%s-.*" % prefix), "sub",
                         initial_position=pulsar.InitialPosition.Earliest)
    got = receive_all(c, 2)
    assert sorted(m.data() for m in got) == [b"a", b"b"]
    # The topic outside the pattern is not subscribed.
    assert_no_message(c, 1000)


@pytest.mark.timeout_s(100)
def test_pattern_discovers_new_topic(client):
    # pulsar-client 3.13 ignores pattern_auto_discovery_period
    # (apache/pulsar-client-python#171): libpulsar polls the namespace's
    # topics every 60 s, its default.
    prefix = unique("pat")
    client.create_producer("persistent://public/default/%s-a" % prefix).send(b"a0")
    c = client.subscribe(re.compile("persistent://public/default/%s-.*" % prefix), "sub",
                         initial_position=pulsar.InitialPosition.Earliest)
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"a0"
    later = "persistent://public/default/%s-b" % prefix
    client.create_producer(later).send(b"b0")
    m = c.receive(timeout_millis=80000)
    assert m.data() == b"b0"
    assert m.topic_name() == later


def test_non_persistent_topic(client):
    t = "non-persistent://public/default/" + unique()
    c = client.subscribe(t, "sub")
    p = client.create_producer(t)
    for i in range(10):
        p.send(b"np%d" % i)
    assert [m.data() for m in receive_all(c, 10)] == [b"np%d" % i for i in range(10)]
    # Nothing is stored: a subscription made later sees only later messages.
    late = client.subscribe(t, "late", initial_position=pulsar.InitialPosition.Earliest)
    p.send(b"after")
    assert late.receive(timeout_millis=TIMEOUT_MS).data() == b"after"
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"after"
