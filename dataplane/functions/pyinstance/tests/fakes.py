"""In-memory stand-ins for the pulsar client objects the runner and the
context use."""

import threading
import time

import pulsar


class MsgId:
    def __init__(self, n, partition=-1):
        self.n = n
        self._partition = partition

    def serialize(self):
        return b"id-%d" % self.n

    def partition(self):
        return self._partition

    def ledger_id(self):
        return 7

    def entry_id(self):
        return self.n


class Message:
    def __init__(self, data, topic="persistent://public/default/in", n=0, key=None, props=None):
        self._data, self._topic, self._id, self._key, self._props = data, topic, MsgId(n), key, props or {}

    def data(self):
        return self._data

    def value(self):
        return self._data.decode()

    def topic_name(self):
        return self._topic

    def message_id(self):
        return self._id

    def properties(self):
        return self._props

    def partition_key(self):
        return self._key

    def ordering_key(self):
        return None

    def event_timestamp(self):
        return 0


class Consumer:
    def __init__(self, topic, sub, kwargs):
        self.topic, self.sub, self.kwargs = topic, sub, kwargs
        self.acked, self.nacked = [], []
        self.closed = self.paused = False

    def deliver(self, msg):
        self.kwargs["message_listener"](self, msg)

    def acknowledge(self, msg):
        self.acked.append(msg)

    def negative_acknowledge(self, msg):
        self.nacked.append(msg)

    def pause_message_listener(self):
        self.paused = True

    def close(self):
        self.closed = True


class Producer:
    def __init__(self, topic, kwargs, auto_result=pulsar.Result.Ok):
        self.topic, self.kwargs, self.auto_result = topic, kwargs, auto_result
        self.sent = []
        self.closed = False

    def send_async(self, payload, callback, **kwargs):
        self.sent.append((payload, kwargs))
        if self.auto_result is not None:
            callback(self.auto_result, MsgId(len(self.sent)))

    def flush(self):
        pass

    def close(self):
        self.closed = True


class Client:
    def __init__(self, publish_result=pulsar.Result.Ok):
        self.consumers, self.producers = [], {}
        self.publish_result = publish_result

    def subscribe(self, topic, sub, **kwargs):
        c = Consumer(topic, sub, kwargs)
        self.consumers.append(c)
        return c

    def create_producer(self, topic, **kwargs):
        p = Producer(topic, kwargs, self.publish_result)
        self.producers[topic] = p
        return p


def eventually(cond, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    raise AssertionError("condition not met in %.1f s" % timeout)


_ = threading
