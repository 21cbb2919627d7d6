"""The instance's life: parse the command line, load the user's code,
serve InstanceControl and metrics, connect, run until SIGTERM (or until the
worker's health checks stop), then close everything.

Exit status: 0 after SIGTERM/SIGINT/SIGHUP and a clean close; 1 when
starting failed or the worker's health checks stopped; 2 for a bad command
line. A start-up failure is printed to stderr as the traceback followed by
one summary line, so the last line of stderr (what the worker keeps for
`status`) says what went wrong.
"""

import logging
import os
import signal
import sys
import threading
import traceback

from . import args as argsmod
from . import logs

log = logging.getLogger("magnetar_instance")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# How long a shutdown may take before the process exits anyway (the worker
# sends SIGKILL about 10 s after SIGTERM).
_SHUTDOWN_DEADLINE_SECONDS = 9.0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        a = argsmod.parse(argv)
        details = argsmod.parse_function_details(a.function_details)
    except argsmod.UsageError as e:
        _report("bad command line", e, with_traceback=False)
        return EXIT_USAGE
    except Exception as e:  # e.g. an unreadable --config_file
        _report("bad command line", e)
        return EXIT_USAGE

    fqfn = "%s/%s/%s" % (details.tenant, details.namespace, details.name)
    try:
        logs.setup(a.logging_level, logs.log_file_path(a.logging_directory, a.logging_file))
    except OSError as e:
        _report("cannot open the log file of %s" % fqfn, e)
        return EXIT_FAILED
    if a.unknown:
        log.warning("ignoring unknown arguments: %s", " ".join(a.unknown))
    log.info("starting instance %s of %s (function id %s, version %s) on %s", a.instance_id, fqfn,
             a.function_id, a.function_version, a.pulsar_serviceurl)

    instance = Instance(a, details)
    stop = threading.Event()
    reason = {"code": EXIT_OK}

    def on_signal(signo, _frame):
        log.info("received %s: shutting down", signal.Signals(signo).name)
        stop.set()

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)

    def on_health_lost():
        reason["code"] = EXIT_FAILED
        stop.set()

    try:
        instance.start(on_health_lost)
    except BaseException as e:
        _report("failed to start function %s" % fqfn, e)
        _close_with_deadline(instance)
        return EXIT_FAILED

    log.info("instance %s of %s is running", a.instance_id, fqfn)
    while not stop.wait(1.0):
        pass
    _close_with_deadline(instance)
    log.info("instance %s of %s stopped", a.instance_id, fqfn)
    logging.shutdown()
    return reason["code"]


class Instance:
    """Everything one running instance owns."""

    def __init__(self, a, details):
        self.args = a
        self.details = details
        self.client = None
        self.runner = None
        self.control = None
        self.watchdog = None
        self.log_handler = None

    def start(self, on_health_lost):
        a, d = self.args, self.details
        from . import control, loader, secrets, state
        from .stats import Stats

        fqfn = "%s/%s/%s" % (d.tenant, d.namespace, d.name)
        stats = Stats((d.tenant, "%s/%s" % (d.tenant, d.namespace), d.name, a.instance_id, a.cluster_name, fqfn))

        # The user's code first: a broken package fails fast, before any
        # port is taken or connection made.
        loader.prepare(a.py, a.install_usercode_dependencies, a.dependency_repository,
                       a.extra_dependency_repository)
        function = loader.UserFunction(loader.import_object(d.className, a.py, load_file_as_module=True), d.className)

        provider_config = None
        if a.secrets_provider_config:
            import json
            provider_config = json.loads(a.secrets_provider_config)
        secrets_provider = secrets.load(a.secrets_provider, provider_config)

        tokens = state.token_source(a.client_auth_plugin, a.client_auth_params)
        store = state.create(a.state_storage_serviceurl, d.tenant, d.namespace, d.name, tokens)
        if not store.configured:
            log.info("no http(s) --state_storage_serviceurl (%r): state calls will fail",
                     a.state_storage_serviceurl or "")

        self.watchdog = control.Watchdog(stats, a.expected_healthcheck_interval, on_health_lost)
        self.control = control.ControlServer(stats, a.instance_id, self.watchdog.healthy)
        self.control.start(a.port, a.metrics_port)
        self.watchdog.start()

        self.client = _client(a)
        scope = logs.UserCodeScope()
        if d.logTopic:
            self.log_handler = logs.LogTopicHandler(self.client, d.logTopic, scope, fqfn, a.instance_id)
            logging.getLogger().addHandler(self.log_handler)

        from .context import InstanceContext
        from .runner import Runner, producer_properties

        ctx = InstanceContext(
            details=d, instance_id=a.instance_id, function_id=a.function_id,
            function_version=a.function_version, client=self.client, consumers={},
            secrets_provider=secrets_provider, state=store, stats=stats, package_path=a.py,
            producer_properties=producer_properties(d, a.instance_id),
            logger=logging.getLogger(logs.USER_LOGGER_NAME))
        self.runner = Runner(details=d, client=self.client, function=function, context=ctx, stats=stats,
                             package_path=a.py, max_buffered=a.max_buffered_tuples, user_scope=scope,
                             instance_id=a.instance_id)
        self.runner.subscribe()
        ctx._consumers.update(self.runner.consumers)
        self.runner.start()

    def close(self):
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.runner is not None:
            self.runner.stop()
        if self.log_handler is not None:
            logging.getLogger().removeHandler(self.log_handler)
            self.log_handler.close()
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                log.exception("closing the Pulsar client")
        if self.control is not None:
            self.control.stop()


def _client(a):
    import pulsar

    auth = None
    if a.client_auth_plugin and a.client_auth_params:
        auth = pulsar.Authentication(a.client_auth_plugin, a.client_auth_params)
    client_log = logging.getLogger("pulsar")
    client_log.setLevel(logging.INFO if logging.getLogger().level <= logging.DEBUG else logging.WARNING)
    return pulsar.Client(
        a.pulsar_serviceurl, authentication=auth, operation_timeout_seconds=30,
        io_threads=1, message_listener_threads=1, use_tls=a.use_tls,
        tls_trust_certs_file_path=a.tls_trust_cert_path or None,
        tls_allow_insecure_connection=a.tls_allow_insecure_connection,
        tls_validate_hostname=a.hostname_verification_enabled, logger=client_log)


def _close_with_deadline(instance):
    """Closes instance; if that hangs, exits the process anyway."""
    t = threading.Timer(_SHUTDOWN_DEADLINE_SECONDS, _hard_exit)
    t.daemon = True
    t.start()
    try:
        instance.close()
    except Exception:
        log.exception("shutdown failed")
    t.cancel()


def _hard_exit():
    log.error("shutdown took longer than %.0f s: exiting", _SHUTDOWN_DEADLINE_SECONDS)
    logging.shutdown()
    os._exit(EXIT_FAILED)


def _report(what, exc, with_traceback=True):
    """Prints the failure to stderr: the traceback, then one summary line."""
    summary = "magnetar python instance: %s: %s: %s" % (what, type(exc).__name__,
                                                         str(exc).strip().replace("\n", " | "))
    if logging.getLogger().handlers:
        log.error("%s", summary, exc_info=exc if with_traceback else None)
        if with_traceback:
            # the stderr handler printed the traceback; end with the summary
            sys.stderr.write(summary + "\n")
    else:
        if with_traceback:
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        sys.stderr.write(summary + "\n")
    sys.stderr.flush()
