"""Messages larger than the broker's limit, sent in chunks and reassembled."""

import os

import pulsar

from clientutil import TIMEOUT_MS


def test_chunked_message(client, topic):
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = os.urandom(3 << 20)  # three times the 1 MiB limit
    small = b"small"
    p.send(big)
    p.send(small)
    m = c.receive(timeout_millis=TIMEOUT_MS)
    assert m.data() == big
    c.acknowledge(m)
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == small


def test_chunked_redelivery(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    p = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = os.urandom((1 << 20) + 12345)
    p.send(big)
    m = c.receive(timeout_millis=TIMEOUT_MS)
    assert m.data() == big
    c.close()
    # Not acknowledged: every chunk is delivered again.
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    m = c.receive(timeout_millis=TIMEOUT_MS)
    assert m.data() == big
    c.acknowledge(m)


def test_chunked_reader(client, topic):
    p = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = os.urandom(2 << 20)
    p.send(b"first")
    p.send(big)
    r = client.create_reader(topic, pulsar.MessageId.earliest)
    assert r.read_next(timeout_millis=TIMEOUT_MS).data() == b"first"
    assert r.read_next(timeout_millis=TIMEOUT_MS).data() == big
