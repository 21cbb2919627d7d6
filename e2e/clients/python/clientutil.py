"""Helpers shared by the Python client tests: the admin REST API over urllib,
unique names, bounded receives and polling."""

import json
import time
import urllib.error
import urllib.request
import uuid

import pulsar
import pytest

# Bound for one receive; a test that waits longer has failed.
TIMEOUT_MS = 10000


class Admin:
    """A few calls of the admin REST API (/admin/v2), with urllib."""

    def __init__(self, base):
        self.base = base

    def call(self, method, path, body=None):
        """Returns the decoded JSON reply (None when empty); raises
        urllib.error.HTTPError on a status of 400 or more."""
        data = None
        headers = {}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def create_namespace(self, ns):
        self.call("PUT", "/admin/v2/namespaces/" + ns)

    def create_partitioned_topic(self, topic, partitions):
        self.call("PUT", "/admin/v2/%s/partitions" % rest_path(topic), partitions)

    def topic_stats(self, topic):
        return self.call("GET", "/admin/v2/%s/stats" % rest_path(topic))


def rest_path(topic):
    """persistent://t/ns/x -> persistent/t/ns/x"""
    domain, rest = topic.split("://", 1)
    return domain + "/" + rest


def unique(prefix="py"):
    return prefix + "-" + uuid.uuid4().hex[:12]


def receive_all(consumer, n, timeout_ms=TIMEOUT_MS, ack=True):
    """Receives n messages (acknowledging each when ack) and returns them."""
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=timeout_ms)
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)
    return out


def assert_no_message(consumer, timeout_ms=1000):
    """Fails when consumer receives anything within timeout_ms."""
    with pytest.raises(pulsar.Timeout):
        msg = consumer.receive(timeout_millis=timeout_ms)
        pytest.fail("unexpected message %r" % msg.data())


def eventually(cond, timeout=10.0, interval=0.1):
    """Polls cond until it returns a true value, which it returns; an admin
    call failing with an HTTP error counts as false. Fails the test after
    timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = cond()
        except urllib.error.HTTPError:
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail("condition not met after %.1fs" % timeout)
        time.sleep(interval)
