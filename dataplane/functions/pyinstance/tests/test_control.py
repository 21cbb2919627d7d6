import socket
import urllib.request

import grpc
import pytest
from google.protobuf import empty_pb2
from prometheus_client.parser import text_string_to_metric_families

from magnetar_instance import control
from magnetar_instance.pb import instance_pb2_grpc
from magnetar_instance.stats import Stats


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served():
    stats = Stats(("public", "public/default", "f", "3", "standalone", "public/default/f"))
    health = []
    srv = control.ControlServer(stats, "3", lambda: health.append(1))
    gport, mport = free_port(), free_port()
    srv.start(gport, mport, metrics_host="127.0.0.1")
    channel = grpc.insecure_channel("127.0.0.1:%d" % gport)
    yield stats, instance_pb2_grpc.InstanceControlStub(channel), health, mport, srv
    channel.close()
    srv.stop()


def record_some(stats):
    stats.received()
    stats.received()
    stats.invocation_started()
    stats.processed(4.0)
    try:
        raise ValueError("bad input")
    except ValueError as e:
        stats.user_exception(e)
    stats.record_user_metric("size", 10)
    stats.record_user_metric("size", 20)


def test_status_metrics_and_health(served):
    stats, stub, health, _, _ = served
    record_some(stats)
    st = stub.GetFunctionStatus(empty_pb2.Empty(), timeout=5)
    assert st.running and st.instanceId == "3"
    assert (st.numReceived, st.numSuccessfullyProcessed, st.numUserExceptions) == (2, 1, 1)
    assert "ValueError: bad input" in st.latestUserExceptions[0].exceptionString
    assert st.averageLatency == 4.0 and st.lastInvocationTime > 0
    md = stub.GetMetrics(empty_pb2.Empty(), timeout=5)
    assert md.receivedTotal == 2 and md.receivedTotal_1min == 2
    assert md.userMetrics["user_metric_size_sum"] == 30 and md.userMetrics["user_metric_size_count"] == 2
    md = stub.GetAndResetMetrics(empty_pb2.Empty(), timeout=5)
    assert md.processedSuccessfullyTotal_1min == 1
    md = stub.GetMetrics(empty_pb2.Empty(), timeout=5)
    assert md.processedSuccessfullyTotal == 1 and md.processedSuccessfullyTotal_1min == 0
    assert not md.userMetrics
    stub.ResetMetrics(empty_pb2.Empty(), timeout=5)
    for _ in range(3):
        assert stub.HealthCheck(empty_pb2.Empty(), timeout=5).success
    assert len(health) == 3


def test_flow_control_is_replenished(served):
    # Requests adding up to more than HTTP/2's initial 64 KiB windows on one
    # connection: the server must hand the window back as it reads.
    _, _, health, _, srv = served
    channel = grpc.insecure_channel("127.0.0.1:%d" % srv._server._listeners[0].getsockname()[1])
    call = channel.unary_unary("/proto.InstanceControl/HealthCheck", request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    big = b"\x0a\xe0\xd4\x03" + b"x" * 60000  # an unknown field 1 of 60000 bytes: still an Empty
    for _ in range(5):
        call(big, timeout=5)
    channel.close()
    assert len(health) == 5


def test_unknown_method_is_unimplemented(served):
    _, _, _, _, srv = served
    channel = grpc.insecure_channel("127.0.0.1:%d" % srv._server._listeners[0].getsockname()[1])
    call = channel.unary_unary("/proto.InstanceControl/Nope", request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        call(b"", timeout=5)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    channel.close()


def test_prometheus_exposition(served):
    stats, _, _, mport, _ = served
    record_some(stats)
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            samples[(s.name, s.labels.get("metric"))] = (s.value, s.labels)
    value, labels = samples[("pulsar_function_received_total", None)]
    assert value == 2
    assert labels == {"tenant": "public", "namespace": "public/default", "name": "f", "instance_id": "3",
                      "cluster": "standalone", "fqfn": "public/default/f"}
    assert samples[("pulsar_function_user_exceptions_total", None)][0] == 1
    assert samples[("pulsar_function_process_latency_ms_count", None)][0] == 1
    assert samples[("pulsar_function_process_latency_ms_sum", None)][0] == 4.0
    assert samples[("pulsar_function_user_metric_sum", "size")][0] == 30
    assert samples[("process_resident_memory_bytes", None)][0] > 0


def test_port_in_use_fails():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        srv = control.ControlServer(Stats(("t", "t/n", "f", "0", "c", "t/n/f")), "0", lambda: None)
        with pytest.raises(OSError, match="InstanceControl"):
            srv.start(taken.getsockname()[1], free_port())


def test_watchdog():
    now = [100.0]
    lost = []
    w = control.Watchdog(Stats(("t", "t/n", "f", "0", "c", "t/n/f")), 10, lambda: lost.append(1),
                         clock=lambda: now[0])
    now[0] += 29
    assert not w.check()
    w.healthy()
    now[0] += 29
    assert not w.check()
    now[0] += 2
    assert w.check()
    off = control.Watchdog(Stats(("t", "t/n", "f", "0", "c", "t/n/f")), 0, lambda: None, clock=lambda: now[0])
    now[0] += 10000
    assert not off.check()
