"""TableView: the latest value of every key of a topic."""

import pulsar
from pulsar.schema import StringSchema

from clientutil import eventually


def test_table_view(client, topic):
    p = client.create_producer(topic, schema=StringSchema())
    p.send("v1", partition_key="a")
    p.send("v1", partition_key="b")
    p.send("v2", partition_key="a")
    tv = client.create_table_view(topic, schema=StringSchema())
    assert len(tv) == 2
    assert tv.get("a") == "v2"
    assert tv.get("b") == "v1"
    seen = []
    tv.for_each_and_listen(lambda k, v: seen.append((k, v)))
    p.send("v3", partition_key="c")
    eventually(lambda: tv.get("c") == "v3")
    eventually(lambda: ("c", "v3") in seen)
    tv.close()


def test_table_view_partitioned(client, admin, topic):
    admin.create_partitioned_topic(topic, 2)
    p = client.create_producer(topic, schema=StringSchema(), batching_enabled=False)
    for i in range(10):
        p.send("v%d" % i, partition_key="k%d" % (i % 5))
    tv = client.create_table_view(topic, schema=StringSchema())
    eventually(lambda: len(tv) == 5)
    assert {k: tv.get(k) for k in ["k%d" % i for i in range(5)]} == {"k%d" % i: "v%d" % (i + 5) for i in range(5)}
    tv.close()
