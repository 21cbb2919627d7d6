"""The instance's statistics: totals since start, a one-minute window, the
latest exceptions and the user's metrics.

They feed the worker's InstanceControl.GetFunctionStatus/GetMetrics (status
and stats) and the Prometheus text exposition on --metrics_port
(prometheus_text), under Pulsar's function metric names:

    pulsar_function_received_total                 counter
    pulsar_function_processed_successfully_total   counter
    pulsar_function_user_exceptions_total          counter
    pulsar_function_system_exceptions_total        counter
    pulsar_function_process_latency_ms             summary (_count, _sum)
    pulsar_function_last_invocation                gauge, ms since the epoch
    pulsar_function_*_1min_total, ..._process_latency_ms_1min   the same over the current minute
    pulsar_function_user_metric                    summary, one series per metric name (label metric)

each labelled tenant, namespace (tenant/namespace), name, instance_id,
cluster and fqfn. All methods are thread-safe (one lock, held briefly).
"""

import threading
import time
import traceback
from collections import deque

LABEL_NAMES = ("tenant", "namespace", "name", "instance_id", "cluster", "fqfn")
USER_METRIC_PREFIX = "user_metric_"
MAX_LATEST_EXCEPTIONS = 10


class _Window:
    __slots__ = ("received", "processed", "user_exceptions", "system_exceptions",
                 "latency_sum_ms", "latency_count")

    def __init__(self):
        self.received = 0
        self.processed = 0
        self.user_exceptions = 0
        self.system_exceptions = 0
        self.latency_sum_ms = 0.0
        self.latency_count = 0

    def avg_latency(self):
        return self.latency_sum_ms / self.latency_count if self.latency_count else 0.0


class Stats:
    def __init__(self, labels, clock=time.time):
        """labels: values for LABEL_NAMES, in order."""
        self.labels = tuple(str(v) for v in labels)
        self._clock = clock
        self._lock = threading.Lock()
        self._total = _Window()
        self._minute = _Window()
        self._last_invocation_ms = 0
        self._latest_user = deque(maxlen=MAX_LATEST_EXCEPTIONS)
        self._latest_system = deque(maxlen=MAX_LATEST_EXCEPTIONS)
        self._user_metrics = {}  # name -> [sum, count], reset with the window

    def received(self):
        with self._lock:
            self._total.received += 1
            self._minute.received += 1

    def invocation_started(self):
        with self._lock:
            self._last_invocation_ms = int(self._clock() * 1000)

    def processed(self, latency_ms):
        with self._lock:
            for w in (self._total, self._minute):
                w.processed += 1
                w.latency_sum_ms += latency_ms
                w.latency_count += 1

    def user_exception(self, exc=None):
        """Counts a user-code exception; call from the except block so the
        traceback is recorded."""
        text = _describe(exc)
        with self._lock:
            self._total.user_exceptions += 1
            self._minute.user_exceptions += 1
            self._latest_user.append((text, int(self._clock() * 1000)))

    def system_exception(self, exc=None):
        """Counts an instance-side failure (serde, publish, ack...)."""
        text = _describe(exc)
        with self._lock:
            self._total.system_exceptions += 1
            self._minute.system_exceptions += 1
            self._latest_system.append((text, int(self._clock() * 1000)))

    def record_user_metric(self, name, value):
        with self._lock:
            m = self._user_metrics.setdefault(str(name), [0.0, 0])
            m[0] += float(value)
            m[1] += 1

    def reset_window(self):
        """Starts a new one-minute window and clears the user metrics (what
        Pulsar's ResetMetrics does)."""
        with self._lock:
            self._minute = _Window()
            self._user_metrics = {}

    def snapshot(self):
        """A consistent copy of everything, as a plain dict."""
        with self._lock:
            t, m = self._total, self._minute
            return {
                "received": t.received, "processed": t.processed,
                "user_exceptions": t.user_exceptions, "system_exceptions": t.system_exceptions,
                "latency_sum_ms": t.latency_sum_ms, "latency_count": t.latency_count,
                "avg_latency_ms": t.avg_latency(),
                "last_invocation_ms": self._last_invocation_ms,
                "received_1min": m.received, "processed_1min": m.processed,
                "user_exceptions_1min": m.user_exceptions, "system_exceptions_1min": m.system_exceptions,
                "latency_sum_ms_1min": m.latency_sum_ms, "latency_count_1min": m.latency_count,
                "avg_latency_ms_1min": m.avg_latency(),
                "latest_user": list(self._latest_user), "latest_system": list(self._latest_system),
                "user_metrics": {k: tuple(v) for k, v in self._user_metrics.items()},
            }

    # --- protobuf views ------------------------------------------------

    def function_status(self, pb, instance_id):
        """An InstanceCommunication FunctionStatus (pb is instance_pb2)."""
        s = self.snapshot()
        st = pb.FunctionStatus(
            running=True, instanceId=str(instance_id),
            numReceived=s["received"], numSuccessfullyProcessed=s["processed"],
            numUserExceptions=s["user_exceptions"], numSystemExceptions=s["system_exceptions"],
            averageLatency=s["avg_latency_ms"], lastInvocationTime=s["last_invocation_ms"])
        for text, ms in s["latest_user"]:
            st.latestUserExceptions.add(exceptionString=text, msSinceEpoch=ms)
        for text, ms in s["latest_system"]:
            st.latestSystemExceptions.add(exceptionString=text, msSinceEpoch=ms)
        return st

    def metrics_data(self, pb):
        """An InstanceCommunication MetricsData (pb is instance_pb2)."""
        s = self.snapshot()
        md = pb.MetricsData(
            receivedTotal=s["received"], processedSuccessfullyTotal=s["processed"],
            systemExceptionsTotal=s["system_exceptions"], userExceptionsTotal=s["user_exceptions"],
            avgProcessLatency=s["avg_latency_ms"], lastInvocation=s["last_invocation_ms"],
            receivedTotal_1min=s["received_1min"], processedSuccessfullyTotal_1min=s["processed_1min"],
            systemExceptionsTotal_1min=s["system_exceptions_1min"],
            userExceptionsTotal_1min=s["user_exceptions_1min"],
            avgProcessLatency_1min=s["avg_latency_ms_1min"])
        for name, (total, count) in s["user_metrics"].items():
            md.userMetrics[USER_METRIC_PREFIX + name + "_sum"] = total
            md.userMetrics[USER_METRIC_PREFIX + name + "_count"] = count
        return md


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def prometheus_text(stats, process_metrics=True):
    """stats in the Prometheus text exposition format (version 0.0.4), as
    bytes. With process_metrics, the process's resident memory, CPU time and
    open file descriptors follow, under the usual process_* names."""
    s = stats.snapshot()
    labels = _labels(LABEL_NAMES, stats.labels)
    out = []
    P = "pulsar_function_"

    def family(name, kind, doc):
        out.append("# HELP %s %s\n# TYPE %s %s\n" % (name, doc, name, kind))

    def sample(name, value, lbl=labels):
        out.append("%s%s %s\n" % (name, lbl, _number(value)))

    def counter(name, doc, value):
        family(P + name + "_total", "counter", doc)
        sample(P + name + "_total", value)

    def summary(name, doc, count, total):
        family(P + name, "summary", doc)
        sample(P + name + "_count", count)
        sample(P + name + "_sum", total)

    counter("received", "Total number of messages received from source.", s["received"])
    counter("processed_successfully", "Total number of messages processed successfully.", s["processed"])
    counter("user_exceptions", "Total number of user exceptions.", s["user_exceptions"])
    counter("system_exceptions", "Total number of system exceptions.", s["system_exceptions"])
    summary("process_latency_ms", "Process latency in milliseconds.", s["latency_count"], s["latency_sum_ms"])
    family(P + "last_invocation", "gauge", "The timestamp of the last invocation of the function.")
    sample(P + "last_invocation", s["last_invocation_ms"])
    counter("received_1min", "Total number of messages received from source in the last 1 minute.",
            s["received_1min"])
    counter("processed_successfully_1min", "Total number of messages processed successfully in the last 1 minute.",
            s["processed_1min"])
    counter("user_exceptions_1min", "Total number of user exceptions in the last 1 minute.",
            s["user_exceptions_1min"])
    counter("system_exceptions_1min", "Total number of system exceptions in the last 1 minute.",
            s["system_exceptions_1min"])
    summary("process_latency_ms_1min", "Process latency in milliseconds in the last 1 minute.",
            s["latency_count_1min"], s["latency_sum_ms_1min"])
    if s["user_metrics"]:
        family(P + "user_metric", "summary", "Pulsar Function user defined metric")
        for name, (total, count) in sorted(s["user_metrics"].items()):
            lbl = _labels(LABEL_NAMES + ("metric",), stats.labels + (name,))
            sample(P + "user_metric_count", count, lbl)
            sample(P + "user_metric_sum", total, lbl)
    if process_metrics:
        out.extend(_process_metrics())
    return "".join(out).encode("utf-8")


def _process_metrics():
    import os
    import resource

    out = []
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * resource.getpagesize()
        out.append("# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                   "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %d\n" % rss)
    except (OSError, ValueError, IndexError):
        pass
    t = os.times()
    out.append("# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
               "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %s\n"
               % _number(t.user + t.system))
    try:
        n = len(os.listdir("/proc/self/fd"))
        out.append("# HELP process_open_fds Number of open file descriptors.\n"
                   "# TYPE process_open_fds gauge\nprocess_open_fds %d\n" % n)
    except OSError:
        pass
    return out


def _labels(names, values):
    return "{" + ",".join('%s="%s"' % (n, _escape(v)) for n, v in zip(names, values)) + "}"


def _escape(v):
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    v = float(v)
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _describe(exc):
    """The current traceback when called in an except block, else str(exc)."""
    tb = traceback.format_exc()
    if tb and not tb.startswith("NoneType: None"):
        return tb
    return "" if exc is None else "%s: %s" % (type(exc).__name__, exc)
