"""Readers: start positions, inclusive start, has_message_available."""

import pulsar
import pytest

from clientutil import TIMEOUT_MS


def produce(client, topic, n):
    p = client.create_producer(topic, batching_enabled=False)
    ids = [p.send(b"r%d" % i) for i in range(n)]
    return p, ids


def test_reader_from_earliest_and_latest(client, topic):
    p, _ = produce(client, topic, 3)
    earliest = client.create_reader(topic, pulsar.MessageId.earliest)
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    p.send(b"r3")
    assert [earliest.read_next(timeout_millis=TIMEOUT_MS).data() for _ in range(4)] == [b"r%d" % i for i in range(4)]
    assert latest.read_next(timeout_millis=TIMEOUT_MS).data() == b"r3"


@pytest.mark.parametrize("inclusive", [False, True])
def test_reader_from_message_id(client, topic, inclusive):
    _, ids = produce(client, topic, 5)
    r = client.create_reader(topic, ids[2], start_message_id_inclusive=inclusive)
    first = 2 if inclusive else 3
    assert [r.read_next(timeout_millis=TIMEOUT_MS).data() for _ in range(first, 5)] == [b"r%d" % i for i in range(first, 5)]


def test_reader_from_serialized_id(client, topic):
    _, ids = produce(client, topic, 3)
    mid = pulsar.MessageId.deserialize(ids[0].serialize())
    r = client.create_reader(topic, mid)
    assert r.read_next(timeout_millis=TIMEOUT_MS).data() == b"r1"


def test_has_message_available(client, topic):
    produce(client, topic, 2)
    r = client.create_reader(topic, pulsar.MessageId.earliest)
    seen = []
    while r.has_message_available():
        seen.append(r.read_next(timeout_millis=TIMEOUT_MS).data())
    assert seen == [b"r0", b"r1"]
    with pytest.raises(pulsar.Timeout):
        r.read_next(timeout_millis=500)


def test_reader_on_partitioned_topic(client, admin, topic):
    admin.create_partitioned_topic(topic, 2)
    p = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        p.send(b"%d" % i)
    r = client.create_reader(topic, pulsar.MessageId.earliest)
    got = sorted(int(r.read_next(timeout_millis=TIMEOUT_MS).data()) for _ in range(6))
    assert got == list(range(6))
