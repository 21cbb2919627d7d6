"""Acknowledgements: individual, cumulative, negative, ack timeout, the dead
letter topic."""

import pulsar
import pytest

from clientutil import TIMEOUT_MS, assert_no_message, eventually, receive_all


def produce(client, topic, n, prefix=b"m"):
    p = client.create_producer(topic)
    for i in range(n):
        p.send(prefix + b"%d" % i)
    p.close()


def backlog(admin, topic, sub):
    return admin.topic_stats(topic)["subscriptions"][sub]["msgBacklog"]


def test_individual_ack_leaves_the_rest(client, admin, topic):
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    produce(client, topic, 4)
    msgs = receive_all(c, 4, ack=False)
    c.acknowledge(msgs[0])
    c.acknowledge(msgs[2].message_id())
    c.close()
    # The two not acknowledged come back to the next consumer.
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    got = sorted(m.data() for m in receive_all(c, 2))
    assert got == [b"m1", b"m3"]
    assert_no_message(c)
    eventually(lambda: backlog(admin, topic, "sub") == 0)


def test_cumulative_ack(client, admin, topic):
    c = client.subscribe(topic, "sub")
    produce(client, topic, 5)
    msgs = receive_all(c, 5, ack=False)
    c.acknowledge_cumulative(msgs[2])
    eventually(lambda: backlog(admin, topic, "sub") == 2)
    c.close()
    c = client.subscribe(topic, "sub")
    assert [m.data() for m in receive_all(c, 2)] == [b"m3", b"m4"]


def test_cumulative_ack_refused_on_shared(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    produce(client, topic, 1)
    m = c.receive(timeout_millis=TIMEOUT_MS)
    with pytest.raises(pulsar.CumulativeAcknowledgementNotAllowedError):
        c.acknowledge_cumulative(m)


def test_negative_ack_redelivers(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                         negative_ack_redelivery_delay_ms=300)
    produce(client, topic, 3)
    msgs = receive_all(c, 3, ack=False)
    c.acknowledge(msgs[0])
    c.acknowledge(msgs[2])
    c.negative_acknowledge(msgs[1])
    again = c.receive(timeout_millis=TIMEOUT_MS)
    assert again.data() == b"m1"
    assert again.redelivery_count() == 1
    c.acknowledge(again)
    assert_no_message(c)


def test_ack_timeout_redelivers(client, topic):
    # 10 s is the smallest ack timeout the client accepts.
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                         unacked_messages_timeout_ms=10000)
    produce(client, topic, 2)
    first = receive_all(c, 2, ack=False)
    c.acknowledge(first[0])
    again = c.receive(timeout_millis=25000)
    assert again.data() == b"m1"
    assert again.redelivery_count() >= 1
    c.acknowledge(again)


def test_redeliver_unacknowledged(client, topic):
    c = client.subscribe(topic, "sub")
    produce(client, topic, 3)
    receive_all(c, 3, ack=False)
    c.redeliver_unacknowledged_messages()
    got = [m.data() for m in receive_all(c, 3)]
    assert got == [b"m0", b"m1", b"m2"]


def test_dead_letter_topic(client, topic):
    dlq = topic + "-dlq"
    dlq_consumer = client.subscribe(dlq, "dlq-sub")
    c = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=200,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=2, dead_letter_topic=dlq))
    p = client.create_producer(topic)
    p.send(b"poison", properties={"k": "v"})
    p.send(b"good")
    deliveries = 0
    good = 0
    # poison: delivered 3 times (redelivery counts 0, 1, 2), then moved.
    while deliveries < 3 or good < 1:
        m = c.receive(timeout_millis=TIMEOUT_MS)
        if m.data() == b"good":
            good += 1
            c.acknowledge(m)
            continue
        assert m.redelivery_count() == deliveries
        deliveries += 1
        c.negative_acknowledge(m)
    dead = dlq_consumer.receive(timeout_millis=TIMEOUT_MS)
    assert dead.data() == b"poison"
    assert dead.properties().get("k") == "v"
    dlq_consumer.acknowledge(dead)
    assert_no_message(c, 1500)


def test_dead_letter_initial_subscription(client, admin, topic):
    dlq = topic + "-DLQ"
    c = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=200,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=1, dead_letter_topic=dlq, initial_subscription_name="init"))
    p = client.create_producer(topic)
    p.send(b"poison")
    for _ in range(2):
        c.negative_acknowledge(c.receive(timeout_millis=TIMEOUT_MS))
    # The dead letter producer creates subscription "init", which keeps the
    # message until someone reads it.
    eventually(lambda: "init" in (admin.topic_stats(dlq).get("subscriptions") or {}), timeout=15)
    late = client.subscribe(dlq, "init")
    assert late.receive(timeout_millis=TIMEOUT_MS).data() == b"poison"
