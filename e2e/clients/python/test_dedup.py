"""Message deduplication: the broker drops a message whose sequence id is not
above the last one it stored for that producer name.

Explicit sequence ids start at 1: pulsar-client 3.13 ignores sequence_id=0
(Producer._build_msg tests it for truth) and numbers that message itself."""

import pulsar

from clientutil import TIMEOUT_MS, assert_no_message, eventually, receive_all, unique


def enable_dedup(admin, ns):
    admin.call("POST", "/admin/v2/namespaces/%s/deduplication" % ns, True)


def test_namespace_dedup_drops_repeats(client, admin, namespace):
    enable_dedup(admin, namespace)
    topic = "persistent://%s/%s" % (namespace, unique())
    # Not loaded yet: the topic opens with deduplication on.
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, producer_name="dedup-p")
    for seq in [1, 2, 3, 2, 3, 4]:
        p.send(b"s%d" % seq, sequence_id=seq)
    got = [m.data() for m in receive_all(c, 4)]
    assert got == [b"s1", b"s2", b"s3", b"s4"]
    assert_no_message(c)
    p.close()
    # A new producer with the same name resumes after the last sequence id.
    p = client.create_producer(topic, producer_name="dedup-p")
    assert p.last_sequence_id() == 4
    p.send(b"s4-again", sequence_id=4)
    p.send(b"s5", sequence_id=5)
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"s5"
    assert_no_message(c)


def test_namespace_dedup_policy_reads_back(admin, namespace):
    enable_dedup(admin, namespace)
    policies = admin.call("GET", "/admin/v2/namespaces/" + namespace)
    assert policies["deduplicationEnabled"] is True


def test_dedup_off_keeps_repeats(client, topic):
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, producer_name=unique("nodedup"))
    for seq in [1, 2, 2]:
        p.send(b"s%d" % seq, sequence_id=seq)
    assert [m.data() for m in receive_all(c, 3)] == [b"s1", b"s2", b"s2"]


def test_topic_dedup_policy(client, admin, topic):
    path = "/admin/v2/persistent/public/default/%s/deduplicationEnabled" % topic.rsplit("/", 1)[1]
    client.create_producer(topic).close()
    admin.call("POST", path, True)
    assert admin.call("GET", path) is True
    # The topic is loaded: the broker rebuilds its state, then says so.
    eventually(lambda: admin.topic_stats(topic)["deduplicationStatus"] == "Enabled")
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, producer_name=unique("tdedup"))
    for seq in [1, 1, 2]:
        p.send(b"s%d" % seq, sequence_id=seq)
    assert [m.data() for m in receive_all(c, 2)] == [b"s1", b"s2"]
    assert_no_message(c)


def test_namespace_dedup_on_loaded_topic(client, admin, namespace):
    topic = "persistent://%s/%s" % (namespace, unique())
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, producer_name=unique("live"))
    p.send(b"s1", sequence_id=1)
    enable_dedup(admin, namespace)
    eventually(lambda: admin.topic_stats(topic)["deduplicationStatus"] == "Enabled")
    # Rebuilt from the entries written before: 1 is a duplicate.
    p.send(b"s1-again", sequence_id=1)
    p.send(b"s2", sequence_id=2)
    assert [m.data() for m in receive_all(c, 2)] == [b"s1", b"s2"]
    assert_no_message(c)
