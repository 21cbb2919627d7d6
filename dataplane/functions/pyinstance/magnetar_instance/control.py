"""What the worker talks to: the InstanceControl gRPC service on
127.0.0.1:--port and the Prometheus exposition on all interfaces'
--metrics_port (as Pulsar's instances bind it; the worker may scrape the
host's address), both served by rpc.Server; and the health watchdog.

The watchdog: when --expected_healthcheck_interval is positive and no
HealthCheck call arrived for three times that interval, the worker is
taken to be gone and the instance stops (exit status 1), as Pulsar's
instances do. The same thread starts a new one-minute metrics window every
60 seconds.
"""

import logging
import threading
import time

log = logging.getLogger(__name__)


class ControlServer:
    """InstanceControl on 127.0.0.1:grpc_port and the metrics on
    metrics_host:metrics_port, served by one rpc.Server thread. on_health
    is called on every HealthCheck."""

    SERVICE = "/proto.InstanceControl/"

    def __init__(self, stats, instance_id, on_health):
        self._stats = stats
        self._instance_id = instance_id
        self._on_health = on_health
        self._server = None

    def start(self, grpc_port, metrics_port, grpc_host="127.0.0.1", metrics_host="0.0.0.0"):
        from google.protobuf import empty_pb2

        from . import rpc
        from .pb import instance_pb2 as pb
        from .stats import CONTENT_TYPE, prometheus_text

        stats, instance_id, on_health = self._stats, self._instance_id, self._on_health

        def reset_metrics(_req):
            stats.reset_window()
            return empty_pb2.Empty()

        def get_and_reset(_req):
            data = stats.metrics_data(pb)
            stats.reset_window()
            return data

        def health(_req):
            on_health()
            return pb.HealthCheckResult(success=True)

        empty = empty_pb2.Empty.FromString
        srv = rpc.Server()
        srv.add_unary(self.SERVICE + "GetFunctionStatus", empty, lambda _r: stats.function_status(pb, instance_id))
        srv.add_unary(self.SERVICE + "GetAndResetMetrics", empty, get_and_reset)
        srv.add_unary(self.SERVICE + "ResetMetrics", empty, reset_metrics)
        srv.add_unary(self.SERVICE + "GetMetrics", empty, lambda _r: stats.metrics_data(pb))
        srv.add_unary(self.SERVICE + "HealthCheck", empty, health)
        srv.add_http("*", lambda: (CONTENT_TYPE, prometheus_text(stats)))
        try:
            srv.listen_grpc(grpc_host, grpc_port)
            srv.listen_http(metrics_host, metrics_port)
        except OSError:
            srv.stop()
            raise
        srv.start()
        self._server = srv
        log.info("InstanceControl on %s:%d, metrics on %s:%d", grpc_host, grpc_port, metrics_host, metrics_port)

    def stop(self):
        if self._server is not None:
            self._server.stop()


class Watchdog:
    """The health watchdog and the one-minute window timer, on one thread."""

    def __init__(self, stats, healthcheck_interval, on_lost, clock=time.monotonic):
        self._stats = stats
        self._interval = healthcheck_interval
        self._on_lost = on_lost
        self._clock = clock
        self._last_health = clock()
        self._stop = threading.Event()
        self._thread = None

    def healthy(self):
        self._last_health = self._clock()

    def check(self):
        """True when the worker's health checks stopped."""
        return self._interval > 0 and self._clock() - self._last_health > 3 * self._interval

    def start(self):
        self._thread = threading.Thread(target=self._run, name="instance-watchdog", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()

    def _run(self):
        next_window = self._clock() + 60
        tick = 1.0 if self._interval <= 0 else min(1.0, self._interval / 2.0)
        while not self._stop.wait(tick):
            now = self._clock()
            if now >= next_window:
                self._stats.reset_window()
                next_window = now + 60
            if self.check():
                log.critical("no health check from the worker for %.0f s (3 x %s s): stopping the instance",
                             now - self._last_health, self._interval)
                self._on_lost()
                return
