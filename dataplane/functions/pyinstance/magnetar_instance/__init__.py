"""Magnetar's Python function instance.

A function worker starts one process per instance of a Python function
(python_instance_main.py, with the flags of Apache Pulsar's instance). The
process loads the user's unmodified code (pulsar.Function subclasses and
plain functions, from .py, .zip or .whl packages), consumes the input
topics, calls the function and produces its results, and reports back to
the worker through the InstanceControl gRPC service and Prometheus metrics.

Modules:
    args     the command line and FunctionDetails JSON
    logs     log file, stderr and the function's log topic
    loader   the user's package and classes, serdes
    context  the Context passed to the user's process()
    runner   consumers, the executor thread, output and acknowledgements
    state    function state over the worker's HTTP state API
    secrets  secrets providers
    stats    counters for status, metrics and Prometheus
    control  InstanceControl service and metrics endpoint, health watchdog
    rpc      the small unary-gRPC-over-HTTP/2 and HTTP/1.1 server behind them
    main     start-up, signals, shutdown and exit codes
    pb       generated protobuf/gRPC modules (api/generate.sh; do not edit)
"""
