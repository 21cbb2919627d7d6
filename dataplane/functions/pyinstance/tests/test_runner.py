import pulsar
import pytest

from fakes import Client, Message, eventually
from magnetar_instance.context import InstanceContext
from magnetar_instance.pb import function_pb2 as fpb
from magnetar_instance.runner import ConfigError, Runner
from magnetar_instance.secrets import ClearTextSecretsProvider
from magnetar_instance.state import NullState
from magnetar_instance.stats import Stats


def details(**over):
    d = fpb.FunctionDetails(tenant="public", namespace="default", name="f", className="x.Y", autoAck=True)
    d.source.inputSpecs["persistent://public/default/in"].SetInParent()
    d.sink.topic = "persistent://public/default/out"
    for k, v in over.items():
        setattr(d, k, v)
    return d


def make(d, function, publish_result=pulsar.Result.Ok):
    client = Client(publish_result)
    stats = Stats(("public", "public/default", "f", "0", "c", "public/default/f"))
    ctx = InstanceContext(details=d, instance_id="0", function_id="id", function_version="v", client=client,
                          consumers={}, secrets_provider=ClearTextSecretsProvider(), state=NullState(), stats=stats)
    r = Runner(details=d, client=client, function=function, context=ctx, stats=stats)
    r.subscribe()
    ctx._consumers.update(r.consumers)
    r.start()
    return r, client, stats


def test_subscription_defaults_like_pulsar():
    r, client, _ = make(details(), lambda v, c: v)
    c = client.consumers[0]
    assert c.sub == "public/default/f"
    assert c.kwargs["consumer_type"] == pulsar.ConsumerType.Shared
    assert c.kwargs["initial_position"] == pulsar.InitialPosition.Latest
    assert "dead_letter_policy" not in c.kwargs
    assert c.kwargs["properties"] == {"application": "pulsar-function", "id": "public/default/f", "instance_id": "0"}
    r.stop()
    assert c.closed


def test_subscription_options_from_details():
    d = details(retainKeyOrdering=True)
    d.source.subscriptionName = "custom"
    d.source.subscriptionPosition = fpb.EARLIEST
    d.source.negativeAckRedeliveryDelayMs = 250
    d.source.timeoutMs = 500
    d.source.inputSpecs["persistent://public/default/in"].receiverQueueSize.value = 7
    d.retryDetails.maxMessageRetries = 3
    d.retryDetails.deadLetterTopic = "dlq"
    r, client, _ = make(d, lambda v, c: v)
    k = client.consumers[0].kwargs
    assert client.consumers[0].sub == "custom"
    assert k["consumer_type"] == pulsar.ConsumerType.KeyShared
    assert k["initial_position"] == pulsar.InitialPosition.Earliest
    assert k["negative_ack_redelivery_delay_ms"] == 250
    assert k["unacked_messages_timeout_ms"] == 10000
    assert k["receiver_queue_size"] == 7
    assert k["dead_letter_policy"].max_redeliver_count == 3
    assert k["dead_letter_policy"].dead_letter_topic == "dlq"
    r.stop()
    d = details()
    d.source.subscriptionType = fpb.FAILOVER
    r, client, _ = make(d, lambda v, c: v)
    assert client.consumers[0].kwargs["consumer_type"] == pulsar.ConsumerType.Failover
    r.stop()


def test_atleast_once_acks_after_the_output_is_persisted():
    r, client, stats = make(details(), lambda v, c: v + "!")
    c = client.consumers[0]
    c.deliver(Message(b"hello", n=1, key="k1"))
    eventually(lambda: c.acked)
    out = client.producers["persistent://public/default/out"]
    payload, kw = out.sent[0]
    assert payload == b"hello!"
    assert kw["properties"]["__pfn_input_topic__"] == "persistent://public/default/in"
    assert kw["properties"]["__pfn_input_msg_id__"] == "aWQtMQ=="  # base64 of b"id-1"
    assert kw["partition_key"] == "k1"
    assert out.kwargs["compression_type"] == pulsar.CompressionType.LZ4
    snap = stats.snapshot()
    assert snap["received"] == 1 and snap["processed"] == 1
    r.stop()


def test_failed_publish_nacks():
    r, client, stats = make(details(), lambda v, c: v, publish_result=pulsar.Result.Timeout)
    c = client.consumers[0]
    c.deliver(Message(b"x"))
    eventually(lambda: c.nacked)
    assert not c.acked and stats.snapshot()["system_exceptions"] == 1
    r.stop()


def test_none_result_is_acked_without_output():
    r, client, _ = make(details(), lambda v, c: None)
    c = client.consumers[0]
    c.deliver(Message(b"x"))
    eventually(lambda: c.acked)
    assert not client.producers
    r.stop()


def test_user_exception_nacks_and_is_recorded():
    def boom(v, c):
        raise KeyError("nope")

    r, client, stats = make(details(), boom)
    c = client.consumers[0]
    c.deliver(Message(b"x"))
    eventually(lambda: c.nacked)
    s = stats.snapshot()
    assert s["user_exceptions"] == 1 and "KeyError" in s["latest_user"][0][0] and not c.acked
    r.stop()


def test_atmost_once_acks_on_receive():
    seen = []
    r, client, _ = make(details(processingGuarantees=fpb.ATMOST_ONCE), lambda v, c: seen.append(v))
    c = client.consumers[0]
    c.deliver(Message(b"x"))
    assert c.acked  # before processing finished
    eventually(lambda: seen)
    r.stop()


@pytest.mark.parametrize("d", [details(processingGuarantees=fpb.MANUAL),
                               details(processingGuarantees=fpb.ATLEAST_ONCE, autoAck=False)])
def test_manual_leaves_acks_to_the_function(d):
    calls = []

    def fn(v, ctx):
        calls.append(v)
        if v == "ack me":
            ctx.ack(ctx.get_message_id(), ctx.get_current_message_topic_name())
        return v

    r, client, _ = make(d, fn)
    c = client.consumers[0]
    c.deliver(Message(b"keep", n=1))
    c.deliver(Message(b"ack me", n=2))
    eventually(lambda: len(calls) == 2 and c.acked)
    assert [mid.n for mid in c.acked] == [2]  # acknowledged by message id
    r.stop()


def test_effectively_once_is_refused():
    with pytest.raises(ConfigError, match="EFFECTIVELY_ONCE"):
        make(details(processingGuarantees=fpb.EFFECTIVELY_ONCE), lambda v, c: v)


def test_no_inputs_is_refused():
    d = details()
    del d.source.inputSpecs["persistent://public/default/in"]
    with pytest.raises(ConfigError, match="no input topics"):
        make(d, lambda v, c: v)


def test_custom_output_serde_and_bad_input():
    d = details()
    d.sink.serDeClassName = "serde.PickleSerDe"
    r, client, stats = make(d, lambda v, c: {"v": v})
    c = client.consumers[0]
    c.deliver(Message(b"3"))
    eventually(lambda: c.acked)
    import pickle
    assert pickle.loads(client.producers["persistent://public/default/out"].sent[0][0]) == {"v": 3}
    r.stop()
