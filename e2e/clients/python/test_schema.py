"""Typed messages with pulsar.schema: JSON, Avro, strings; the broker keeps
the schema and refuses an incompatible one."""

import pulsar
import pytest
from pulsar.schema import (AvroSchema, Float, Integer, JsonSchema, Record,
                           String, StringSchema)

from clientutil import TIMEOUT_MS


class Order(Record):
    id = Integer()
    item = String()
    price = Float()


class Other(Record):
    name = String(required=True)
    count = Integer(required=True)


@pytest.mark.parametrize("schema_type", [JsonSchema, AvroSchema], ids=["json", "avro"])
def test_record_round_trip(client, admin, topic, schema_type):
    schema = schema_type(Order)
    c = client.subscribe(topic, "sub", schema=schema)
    p = client.create_producer(topic, schema=schema)
    p.send(Order(id=1, item="book", price=9.5))
    m = c.receive(timeout_millis=TIMEOUT_MS)
    v = m.value()
    assert (v.id, v.item, v.price) == (1, "book", 9.5)
    c.acknowledge(m)
    info = admin.call("GET", "/admin/v2/schemas/public/default/%s/schema" % topic.rsplit("/", 1)[1])
    assert info["type"] == ("JSON" if schema_type is JsonSchema else "AVRO")
    assert "item" in info["data"]


def test_string_schema(client, topic):
    c = client.subscribe(topic, "sub", schema=StringSchema())
    p = client.create_producer(topic, schema=StringSchema())
    p.send("héllo")
    assert c.receive(timeout_millis=TIMEOUT_MS).value() == "héllo"


def test_incompatible_schema_refused(client, topic):
    client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=1, item="a", price=1.0))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(Other))


def test_bytes_consumer_reads_json(client, topic):
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, schema=JsonSchema(Order))
    p.send(Order(id=7, item="pen", price=2.0))
    import json
    assert json.loads(c.receive(timeout_millis=TIMEOUT_MS).data())["item"] == "pen"
