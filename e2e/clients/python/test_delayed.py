"""Delayed delivery on a Shared subscription."""

import time
from datetime import timedelta

import pulsar

from clientutil import TIMEOUT_MS


def test_deliver_after(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    p = client.create_producer(topic)
    start = time.monotonic()
    p.send(b"late", deliver_after=timedelta(seconds=2))
    p.send(b"now")
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"now"
    m = c.receive(timeout_millis=TIMEOUT_MS)
    assert m.data() == b"late"
    assert time.monotonic() - start >= 1.9
    c.acknowledge(m)


def test_deliver_at(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    p = client.create_producer(topic)
    at_ms = int(time.time() * 1000) + 2000
    p.send(b"at", deliver_at=at_ms)
    m = c.receive(timeout_millis=TIMEOUT_MS)
    assert m.data() == b"at"
    assert time.time() * 1000 >= at_ms - 100
    c.acknowledge(m)


def test_delay_ignored_on_exclusive(client, topic):
    # Delayed delivery applies to Shared and Key_Shared only; an exclusive
    # subscription gets the message at once.
    c = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    p = client.create_producer(topic)
    start = time.monotonic()
    p.send(b"x", deliver_after=timedelta(seconds=5))
    assert c.receive(timeout_millis=TIMEOUT_MS).data() == b"x"
    assert time.monotonic() - start < 4
