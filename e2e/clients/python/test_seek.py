"""Seek with the C++-based Python client (libpulsar).

libpulsar takes the broker's CLOSE_CONSUMER that follows a seek as the
signal to reconnect from the seek position; it must arrive before the
SEEK's SUCCESS, or the client reconnects from where it was and the seek
is lost. Each test reads a topic to its end, seeks back, and checks what
comes next.
"""

import pulsar

N = 10
TIMEOUT_MS = 10000


def produce(client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(N):
        producer.send(("m%d" % i).encode())
    producer.close()


def drain(receive):
    """Receives the N messages; returns their ids and publish times."""
    ids, times = [], []
    for i in range(N):
        msg = receive()
        assert msg.data() == ("m%d" % i).encode()
        ids.append(msg.message_id())
        times.append(msg.publish_timestamp())
    return ids, times


def first_at_or_after(times, ts):
    return next(i for i, t in enumerate(times) if t >= ts)


def test_consumer_seek_by_message_id(client, topic):
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic)

    def receive():
        msg = consumer.receive(timeout_millis=TIMEOUT_MS)
        consumer.acknowledge(msg)
        return msg

    ids, _ = drain(receive)
    consumer.seek(ids[3])
    # The broker delivers from the message sought; libpulsar, like the
    # Java client (start_message_id_inclusive unset), drops that message.
    for i in range(4, N):
        assert receive().data() == ("m%d" % i).encode()
    consumer.close()


def test_consumer_seek_by_timestamp(client, topic):
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic)

    def receive():
        msg = consumer.receive(timeout_millis=TIMEOUT_MS)
        consumer.acknowledge(msg)
        return msg

    _, times = drain(receive)
    consumer.seek(times[5])
    # The first message published at or after the time comes next.
    want = first_at_or_after(times, times[5])
    for i in range(want, N):
        assert receive().data() == ("m%d" % i).encode()
    consumer.close()


def test_reader_seek_by_message_id(client, topic):
    produce(client, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    ids, _ = drain(lambda: reader.read_next(timeout_millis=TIMEOUT_MS))
    reader.seek(ids[3])
    # A reader (start not inclusive) resumes after the message sought.
    for i in range(4, N):
        assert reader.read_next(timeout_millis=TIMEOUT_MS).data() == ("m%d" % i).encode()
    reader.close()


def test_reader_seek_by_timestamp(client, topic):
    produce(client, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    _, times = drain(lambda: reader.read_next(timeout_millis=TIMEOUT_MS))
    reader.seek(times[5])
    want = first_at_or_after(times, times[5])
    for i in range(want, N):
        assert reader.read_next(timeout_millis=TIMEOUT_MS).data() == ("m%d" % i).encode()
    reader.close()
