"""Producing and consuming: batching, each compression codec, keys,
properties, event times and asynchronous sends."""

import threading

import pulsar
import pytest

from clientutil import TIMEOUT_MS, receive_all

N = 50

CODECS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: str(c).split(".")[-1])
def test_produce_consume(client, topic, codec, batching):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic, compression_type=codec, batching_enabled=batching,
        batching_max_messages=10, batching_max_publish_delay_ms=50)
    # Compressible payloads, large enough that every codec shrinks them.
    payloads = [(("m%03d-" % i) * 40).encode() for i in range(N)]
    if batching:
        done = threading.Semaphore(0)
        results = []

        def sent(res, msg_id):
            results.append(res)
            done.release()

        for p in payloads:
            producer.send_async(p, sent)
        producer.flush()
        for _ in payloads:
            assert done.acquire(timeout=TIMEOUT_MS / 1000)
        assert all(r == pulsar.Result.Ok for r in results)
    else:
        for p in payloads:
            producer.send(p)
    got = receive_all(consumer, N)
    assert [m.data() for m in got] == payloads
    if batching:
        # Ten to a batch: several messages share an entry.
        assert any(m.message_id().batch_index() > 0 for m in got)
    producer.close()
    consumer.close()


def test_key_properties_event_time(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, producer_name="named-producer")
    producer.send(b"hello", properties={"a": "1", "b": "two"}, partition_key="k1",
                  ordering_key="o1", event_timestamp=1234567)
    msg = consumer.receive(timeout_millis=TIMEOUT_MS)
    assert msg.data() == b"hello"
    assert msg.properties() == {"a": "1", "b": "two"}
    assert msg.partition_key() == "k1"
    assert msg.ordering_key() == "o1"
    assert msg.event_timestamp() == 1234567
    assert msg.publish_timestamp() > 0
    assert msg.producer_name() == "named-producer"
    assert msg.topic_name() == topic
    assert msg.redelivery_count() == 0
    consumer.acknowledge(msg)


def test_large_message_and_empty_payload(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    big = bytes(range(256)) * 2048  # 512 KiB, under the 1 MiB limit
    producer.send(big)
    producer.send(b"")
    assert consumer.receive(timeout_millis=TIMEOUT_MS).data() == big
    assert consumer.receive(timeout_millis=TIMEOUT_MS).data() == b""


def test_too_big_without_chunking(client, topic):
    producer = client.create_producer(topic)
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"x" * (2 << 20))


def test_last_sequence_id_and_message_ids(client, topic):
    producer = client.create_producer(topic)
    ids = [producer.send(b"x%d" % i) for i in range(5)]
    assert producer.last_sequence_id() == 4
    # Message ids grow in publish order.
    assert ids == sorted(ids)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_all(consumer, 5)
    assert [m.message_id() for m in got] == ids
    assert consumer.get_last_message_id() == ids[-1]


def test_batch_receive(client, topic):
    consumer = client.subscribe(
        topic, "sub",
        batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(10, -1, 2000))
    producer = client.create_producer(topic, batching_enabled=True)
    for i in range(10):
        producer.send_async(b"b%d" % i, None)
    producer.flush()
    got = []
    for _ in range(10):
        batch = consumer.batch_receive()
        for m in batch:
            got.append(m.data())
            consumer.acknowledge(m)
        if len(got) >= 10:
            break
    assert got == [b"b%d" % i for i in range(10)]
