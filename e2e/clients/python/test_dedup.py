"""Message deduplication: the broker drops a message whose sequence id is not
above the last one it stored for that producer name."""

import pulsar

from clientutil import TIMEOUT_MS, assert_no_message, eventually, receive_all, unique


def enable_dedup(admin, ns):
    admin.call("POST", "/admin/v2/namespaces/%s/deduplication" % ns, True)


def test_namespace_dedup_drops_repeats(client, admin, namespace):
    enable_dedup(admin, namespace)
    topic = "persistent://%s/%s" % (namespace, unique())
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, producer_name="dedup-p")
    for seq in [0, 1, 2, 1, 2, 3]:
        p.send(b"s%d" % seq, sequence_id=seq)
    got = [m.data() for m in receive_all(c, 4)]
    assert got == [b"s0", b"s1", b"s2", b"s3"]
    assert_no_message(c)
    p.close()
    # A new producer with the same name resumes after the last sequence id.
    p = client.create_producer(topic, producer_name="dedup-p")
    assert p.last_sequence_id() == 3
    p.send(b"s3-again", sequence_id=3)
    p.send(b"s4", sequence_id=4)
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"s4"
    assert_no_message(c)


def test_namespace_dedup_policy_reads_back(admin, namespace):
    enable_dedup(admin, namespace)
    policies = admin.call("GET", "/admin/v2/namespaces/" + namespace)
    assert policies["deduplicationEnabled"] is True


def test_dedup_off_keeps_repeats(client, topic):
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, producer_name=unique("nodedup"))
    for seq in [0, 1, 1]:
        p.send(b"s%d" % seq, sequence_id=seq)
    assert [m.data() for m in receive_all(c, 3)] == [b"s0", b"s1", b"s1"]


def test_topic_dedup_policy(client, admin, topic):
    path = "/admin/v2/persistent/public/default/%s/deduplicationEnabled" % topic.rsplit("/", 1)[1]
    client.create_producer(topic).close()
    admin.call("POST", path, True)
    eventually(lambda: admin.call("GET", path) is True)
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, producer_name=unique("tdedup"))
    for seq in [0, 0, 1]:
        p.send(b"s%d" % seq, sequence_id=seq)
    assert [m.data() for m in receive_all(c, 2)] == [b"s0", b"s1"]
    assert_no_message(c)
