import pytest

from fakes import Client, Message
from magnetar_instance.context import InstanceContext
from magnetar_instance.pb import function_pb2 as fpb
from magnetar_instance import secrets
from magnetar_instance.state import NullState
from magnetar_instance.stats import Stats
from pulsar.functions.context import Context


def make_ctx(provider=None, **details):
    d = fpb.FunctionDetails(tenant="t", namespace="n", name="f", **details)
    d.source.inputSpecs["in"].SetInParent()
    d.sink.topic = "out"
    client = Client()
    stats = Stats(("t", "t/n", "f", "1", "c", "t/n/f"))
    ctx = InstanceContext(details=d, instance_id="1", function_id="fid", function_version="ver", client=client,
                          consumers={}, secrets_provider=provider or secrets.ClearTextSecretsProvider(),
                          state=NullState(), stats=stats)
    return ctx, client, stats


def test_implements_every_context_method():
    abstract = [n for n, v in vars(Context).items() if getattr(v, "__isabstractmethod__", False)]
    assert len(abstract) > 20
    for name in abstract:
        assert getattr(InstanceContext, name) is not getattr(Context, name), name


def test_identity_config_and_message():
    ctx, client, _ = make_ctx(userConfig='{"greeting": "hi", "n": 3}')
    assert (ctx.get_function_tenant(), ctx.get_function_namespace(), ctx.get_function_name()) == ("t", "n", "f")
    assert (ctx.get_function_id(), ctx.get_function_version(), ctx.get_instance_id()) == ("fid", "ver", "1")
    assert ctx.get_input_topics() == ["in"] and ctx.get_output_topic() == "out"
    assert ctx.get_user_config_value("greeting") == "hi" and ctx.get_user_config_value("missing") is None
    assert ctx.get_user_config_map() == {"greeting": "hi", "n": 3}
    consumer = client.subscribe("in", "s")
    msg = Message(b"x", topic="persistent://public/default/in", n=4, key="k", props={"a": "b"})
    ctx.set_current_message(msg, consumer)
    assert ctx.get_message_key() == "k" and ctx.get_partition_key() == "k"
    assert ctx.get_message_properties() == {"a": "b"}
    assert ctx.get_current_message_topic_name() == "persistent://public/default/in"
    assert ctx.get_message_sequence_id() == (7 << 28) | 4
    assert ctx.get_message_partition_index() == -1
    ctx._consumers["in"] = consumer
    ctx.ack(msg.message_id(), "persistent://public/default/in-partition-0")
    ctx.ack()
    assert len(consumer.acked) == 2


def test_secrets(monkeypatch):
    ctx, _, _ = make_ctx(secretsMap='{"password": "s3cret", "API_KEY": "ignored"}')
    assert ctx.get_secret("password") == "s3cret" and ctx.get_secret("other") is None
    monkeypatch.setenv("API_KEY", "from-env")
    env = secrets.load("secretsprovider.EnvironmentBasedSecretsProvider", None)
    ctx, _, _ = make_ctx(provider=env, secretsMap='{"API_KEY": "ignored"}')
    assert ctx.get_secret("API_KEY") == "from-env"
    java = secrets.load("org.apache.pulsar.functions.secretsprovider.ClearTextSecretsProvider", None)
    assert isinstance(java, secrets.ClearTextSecretsProvider)


def test_metrics_publish_and_state():
    ctx, client, stats = make_ctx()
    ctx.record_metric("latency", 2)
    ctx.record_metric("latency", 4)
    assert stats.snapshot()["user_metrics"]["latency"] == (6.0, 2)
    got = []
    ctx.publish("side", "hello", properties={"p": "1"}, callback=lambda res, mid: got.append(res))
    ctx.publish("side", 5, message_conf={"partition_key": "k"})
    p = client.producers["side"]
    assert p.sent[0] == (b"hello", {"properties": {"p": "1"}})
    assert p.sent[1] == (b"5", {"partition_key": "k"})
    assert len(got) == 1
    with pytest.raises(RuntimeError, match="state storage is not configured"):
        ctx.incr_counter("k", 1)
    with pytest.raises(RuntimeError, match="state storage is not configured"):
        ctx.get_state("k")
