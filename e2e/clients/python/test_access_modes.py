"""Producer access modes: Shared, Exclusive, WaitForExclusive,
ExclusiveWithFencing."""

import threading

import pulsar
import pytest

from clientutil import TIMEOUT_MS

Mode = pulsar.ProducerAccessMode


def test_shared_producers(client, topic):
    a = client.create_producer(topic, access_mode=Mode.Shared)
    b = client.create_producer(topic, access_mode=Mode.Shared)
    c = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    a.send(b"a")
    b.send(b"b")
    assert sorted([c.receive(timeout_millis=TIMEOUT_MS).data() for _ in range(2)]) == [b"a", b"b"]


def test_exclusive_refuses_others(client, topic):
    client.create_producer(topic, access_mode=Mode.Exclusive)
    # A second exclusive producer is fenced out, a shared one is busy.
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, access_mode=Mode.Shared)


def test_shared_blocks_exclusive(client, topic):
    client.create_producer(topic, access_mode=Mode.Shared)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)


def test_wait_for_exclusive(client, topic):
    first = client.create_producer(topic, access_mode=Mode.Exclusive)
    got = {}

    def create():
        got["p"] = client.create_producer(topic, access_mode=Mode.WaitForExclusive)

    t = threading.Thread(target=create, daemon=True)
    t.start()
    t.join(1.5)
    assert t.is_alive(), "WaitForExclusive must wait while another producer is exclusive"
    first.close()
    t.join(TIMEOUT_MS / 1000)
    assert not t.is_alive()
    got["p"].send(b"mine")


def test_exclusive_with_fencing(client, topic):
    old = client.create_producer(topic, access_mode=Mode.Exclusive)
    old.send(b"old")
    new = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
    new.send(b"new")
    with pytest.raises((pulsar.ProducerFenced, pulsar.AlreadyClosed, pulsar.ProducerBusy,
                        pulsar.TopicTerminated, pulsar.Timeout)):
        old.send(b"fenced")
    c = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"old"
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"new"
