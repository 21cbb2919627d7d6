"""Logging: a rotating file, stderr, and optionally the function's log topic.

The file is ``<logging_directory>/<logging_file>.log`` (directories are
created): the worker names each instance's file itself (Magnetar's worker
passes a per-function directory and ``<name>-<instance id>``). Pulsar's own
Python instance instead appends ``<tenant>/<namespace>/<name>/`` and
``-<instance id>``. Everything also goes to stderr, which the worker keeps.

When the function has a log topic, records logged *by the user's code while
it processes a message* (through context.get_logger() or any other logger)
are also produced to that topic; the instance's own records are not.
"""

import logging
import logging.handlers
import os
import threading

LEVELS = {
    "notset": logging.NOTSET, "debug": logging.DEBUG, "info": logging.INFO,
    "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR,
    "critical": logging.CRITICAL, "fatal": logging.CRITICAL,
}

FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
DATEFMT = "%Y-%m-%dT%H:%M:%S"

# The logger handed to user code by Context.get_logger().
USER_LOGGER_NAME = "function"


def log_file_path(logging_directory, logging_file):
    """Where the instance writes its log file."""
    return os.path.join(logging_directory, logging_file + ".log")


def setup(level_name, path):
    """Sends the root logger to stderr and, when path is set, to a rotating
    file there (10 MB, 5 old files). Returns the effective level."""
    level = LEVELS.get((level_name or "info").lower(), logging.INFO)
    root = logging.getLogger()
    root.setLevel(level)
    for h in list(root.handlers):
        root.removeHandler(h)
    fmt = logging.Formatter(FORMAT, DATEFMT)
    err = logging.StreamHandler()
    err.setFormatter(fmt)
    root.addHandler(err)
    if path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fh = logging.handlers.RotatingFileHandler(path, maxBytes=10 * 1024 * 1024, backupCount=5,
                                                  encoding="utf-8")
        fh.setFormatter(fmt)
        root.addHandler(fh)
    return level


class UserCodeScope:
    """Marks the thread that is running user code, so handlers can tell the
    user's records from the instance's."""

    def __init__(self):
        self._local = threading.local()

    def __enter__(self):
        self._local.active = True
        return self

    def __exit__(self, *exc):
        self._local.active = False
        return False

    def active(self):
        return getattr(self._local, "active", False)


class LogTopicHandler(logging.Handler):
    """Produces user-code log records to the function's log topic. The
    producer is created on the first record; each message is the formatted
    line, with the level, the function and the instance as properties."""

    def __init__(self, client, topic, scope, fqfn, instance_id):
        super().__init__()
        self._client = client
        self._topic = topic
        self._scope = scope
        self._props = {"fqn": fqfn, "instance": str(instance_id)}
        self._producer = None
        self._failed = False
        self.setFormatter(logging.Formatter(FORMAT, DATEFMT))

    def emit(self, record):
        if not self._scope.active() or self._failed:
            return
        try:
            if self._producer is None:
                self._producer = self._client.create_producer(
                    self._topic, block_if_queue_full=True, batching_enabled=True,
                    batching_max_publish_delay_ms=100, properties=dict(self._props))
            props = dict(self._props, loglevel=record.levelname)
            self._producer.send_async(self.format(record).encode("utf-8"), _ignore, properties=props)
        except Exception:  # never let logging break the function
            self._failed = True
            logging.getLogger(__name__).exception("log topic %s disabled", self._topic)

    def close(self):
        p, self._producer = self._producer, None
        if p is not None:
            try:
                p.flush()
                p.close()
            except Exception:
                pass
        super().close()


def _ignore(*_):
    pass
