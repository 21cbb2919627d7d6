"""The instance's command line.

A function worker starts the instance with the flags of Apache Pulsar's
``python_instance_main.py`` (Pulsar's ``RuntimeUtils.getCmd``), so an
unchanged worker command line works here. This module parses those flags,
merges an optional ``--config_file`` (an INI file whose ``[DEFAULT]``
section holds flag values, for settings too long for one argv string),
checks the required ones and decodes ``--function_details``.
"""

import argparse
import configparser
import logging

from .pb import function_pb2

log = logging.getLogger(__name__)

# Flags without which the instance cannot start (as in Pulsar's runner).
REQUIRED = (
    "function_details", "py", "instance_id", "function_id", "function_version",
    "pulsar_serviceurl", "port", "metrics_port", "max_buffered_tuples",
    "logging_directory", "logging_file", "logging_config_file",
    "expected_healthcheck_interval", "cluster_name",
)

# Flags read as integers once the config file has been merged.
_INTEGER_FLAGS = ("port", "metrics_port", "max_buffered_tuples", "expected_healthcheck_interval")


class UsageError(Exception):
    """A missing or malformed flag; the message names it."""


def build_parser():
    """The argument parser. Every flag is optional at parse time: the
    required ones may come from --config_file and are checked afterwards.
    argparse's prefix matching stays on, so the worker's shorter
    --tls_allow_insecure reaches --tls_allow_insecure_connection."""
    p = argparse.ArgumentParser(
        prog="python_instance_main.py",
        description="Magnetar's Python function instance (Pulsar's command-line contract)",
        allow_abbrev=True,
    )
    s = p.add_argument
    s("--function_details", help="FunctionDetails as proto3 JSON, optionally wrapped in single quotes")
    s("--py", help="the function's code: a .py file, a .zip or a .whl")
    s("--instance_id", help="this instance's index in the function's parallelism")
    s("--function_id", help="the function's id (a UUID per start)")
    s("--function_version", help="the function's version (a UUID per start)")
    s("--pulsar_serviceurl", help="the broker's pulsar:// or pulsar+ssl:// URL")
    s("--client_auth_plugin", help="client authentication plugin (Java class name or library)")
    s("--client_auth_params", help="client authentication parameters, e.g. token:xxx or file:///path")
    s("--use_tls", help="true to use TLS")
    s("--tls_allow_insecure_connection", help="true to accept untrusted TLS certificates")
    s("--hostname_verification_enabled", help="true to verify the broker's host name")
    s("--tls_trust_cert_path", help="CA bundle for TLS")
    s("--port", help="port of the InstanceControl gRPC server (127.0.0.1)")
    s("--metrics_port", help="port of the Prometheus metrics server")
    s("--max_buffered_tuples", help="bound on messages buffered between consumers and the function")
    s("--logging_directory", help="root directory of function logs")
    s("--logging_file", help="log file name (without .log)")
    s("--logging_level", help="notset, debug, info, warn, warning, error, critical or fatal")
    s("--logging_config_file", help="accepted for compatibility; not read")
    s("--expected_healthcheck_interval", help="seconds between the worker's health checks; <= 0 disables the watchdog")
    s("--secrets_provider", help="secrets provider class")
    s("--secrets_provider_config", help="secrets provider configuration as JSON, optionally single-quoted")
    s("--install_usercode_dependencies", help="true to pip install a package's declared dependencies")
    s("--dependency_repository", help="package index for dependencies")
    s("--extra_dependency_repository", help="extra package index for dependencies")
    s("--state_storage_serviceurl", help="base http(s) URL of the worker's state API")
    s("--cluster_name", help="the cluster this instance runs in")
    s("--config_file", default="", help="INI file whose [DEFAULT] section supplies flags not given")
    s("--web_serviceurl", help="the admin HTTP URL (accepted; the Python API has no admin client)")
    s("--expose_pulsaradmin", nargs="?", const="true", help="accepted for compatibility; unused")
    s("--pending_async_requests", help="accepted for compatibility; unused")
    return p


def parse(argv):
    """Parses argv (without the program name) into a namespace.

    Unknown flags are logged and ignored so a newer worker does not crash
    an older instance. Raises UsageError for missing or malformed flags.
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    args.unknown = unknown
    merge_config_file(args, args.config_file)
    # As in Pulsar, a flag given with an empty value is present (the worker
    # passes --logging_config_file "").
    missing = [k for k in REQUIRED if getattr(args, k) is None]
    if missing:
        raise UsageError("missing required arguments: " + ", ".join("--" + k for k in missing))
    for k in _INTEGER_FLAGS:
        try:
            setattr(args, k, int(getattr(args, k)))
        except (TypeError, ValueError):
            raise UsageError("--%s must be an integer, got %r" % (k, getattr(args, k))) from None
    for k in ("use_tls", "tls_allow_insecure_connection", "hostname_verification_enabled",
              "install_usercode_dependencies", "expose_pulsaradmin"):
        setattr(args, k, truthy(getattr(args, k)))
    args.secrets_provider_config = strip_quotes(args.secrets_provider_config)
    return args


def merge_config_file(args, path):
    """Fills flags not given on the command line from the [DEFAULT]
    section of the INI file at path (the command line wins)."""
    if not path:
        return
    cp = configparser.ConfigParser(interpolation=None)
    with open(path, encoding="utf-8") as f:
        cp.read_file(f)
    defaults = cp.defaults()
    for key, value in defaults.items():
        if key == "config_file" or not hasattr(args, key):
            continue
        if getattr(args, key) in (None, ""):
            setattr(args, key, value)


def truthy(value):
    """Pulsar passes booleans as the words true/false (any case)."""
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def strip_quotes(text):
    """Removes one leading and one trailing single quote: the worker wraps
    JSON values in quotes meant for a shell, but starts the process without
    one."""
    if text is None:
        return None
    text = str(text)
    if text.startswith("'"):
        text = text[1:]
    if text.endswith("'"):
        text = text[:-1]
    return text


def parse_function_details(text):
    """Decodes --function_details (proto3 JSON) into a FunctionDetails.
    Fields this instance does not know are ignored, so a newer worker's
    details still load."""
    from google.protobuf import json_format

    details = function_pb2.FunctionDetails()
    try:
        json_format.Parse(strip_quotes(text), details, ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise UsageError("--function_details is not valid FunctionDetails JSON: %s" % e) from None
    return details
