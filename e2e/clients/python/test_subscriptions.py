"""The four subscription types: who gets which message."""

import pulsar
import pytest

from clientutil import TIMEOUT_MS, assert_no_message, eventually, receive_all


def test_exclusive_refuses_second_consumer(client, topic):
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    # Another subscription on the same topic is fine.
    other = client.subscribe(topic, "other", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic)
    producer.send(b"x")
    assert first.receive(timeout_millis=TIMEOUT_MS).data() == b"x"
    assert other.receive(timeout_millis=TIMEOUT_MS).data() == b"x"


def test_shared_spreads_messages(client, topic):
    a = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    b = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
    producer = client.create_producer(topic)
    n = 40
    for i in range(n):
        producer.send(b"s%d" % i)
    got = {"a": [], "b": []}
    for _ in range(n):
        for name, c in (("a", a), ("b", b)):
            try:
                m = c.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            c.acknowledge(m)
            got[name].append(m.data())
        if len(got["a"]) + len(got["b"]) >= n:
            break
    assert sorted(got["a"] + got["b"]) == sorted(b"s%d" % i for i in range(n))
    assert got["a"] and got["b"], "both consumers should get messages"


def test_failover_switches_on_close(client, topic):
    a = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    b = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(b"f%d" % i)
    # For a non-partitioned topic the active consumer is the first by name.
    got = [m.data() for m in receive_all(a, 5)]
    assert got == [b"f%d" % i for i in range(5)]
    assert_no_message(b, 500)
    a.close()
    for i in range(5, 10):
        producer.send(b"f%d" % i)
    got = [m.data() for m in receive_all(b, 5)]
    assert got == [b"f%d" % i for i in range(5, 10)]


def test_key_shared_keeps_keys_together(client, topic):
    consumers = [client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared,
                                  consumer_name="c%d" % i) for i in range(2)]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = ["key-%d" % i for i in range(8)]
    n = 80
    for i in range(n):
        producer.send(b"%d" % i, partition_key=keys[i % len(keys)])
    owner = {}
    order = {}
    total = 0

    def drain():
        nonlocal total
        for idx, c in enumerate(consumers):
            while True:
                try:
                    m = c.receive(timeout_millis=200)
                except pulsar.Timeout:
                    break
                c.acknowledge(m)
                k = m.partition_key()
                assert owner.setdefault(k, idx) == idx, "key %s went to two consumers" % k
                order.setdefault(k, []).append(int(m.data()))
                total += 1
        return total >= n

    eventually(drain, timeout=20)
    for k, seq in order.items():
        assert seq == sorted(seq), "key %s out of order" % k
    assert len(set(owner.values())) == 2, "8 keys over 2 consumers should use both"


def test_key_shared_sticky_ranges(client, topic):
    policy = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 65535)])
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared,
                         key_shared_policy=policy)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(b"%d" % i, partition_key="k%d" % i)
    got = [m.data() for m in receive_all(c, 10)]
    assert got == [b"%d" % i for i in range(10)]


def test_unsubscribe_drops_backlog(client, topic):
    producer = client.create_producer(topic)
    c = client.subscribe(topic, "sub")
    producer.send(b"old")
    c.unsubscribe()
    c = client.subscribe(topic, "sub")
    producer.send(b"new")
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"new"


def test_initial_position(client, topic):
    producer = client.create_producer(topic)
    producer.send(b"before")
    latest = client.subscribe(topic, "latest", initial_position=pulsar.InitialPosition.Latest)
    earliest = client.subscribe(topic, "earliest", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"after")
    assert latest.receive(timeout_millis=TIMEOUT_MS).data() == b"after"
    assert earliest.receive(timeout_millis=TIMEOUT_MS).data() == b"before"
    assert earliest.receive(timeout_millis=TIMEOUT_MS).data() == b"after"
