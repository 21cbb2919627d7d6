// Package pyinstance holds Magnetar's Python function instance and hands
// it to function workers.
//
// The instance is Python (python_instance_main.py and the magnetar_instance
// package beside it): one process per instance of a user's Python function,
// started with the command line of Apache Pulsar's python_instance_main.py
// (--py, --function_details '<FunctionDetails JSON>', --port,
// --metrics_port, ...), running users' unmodified pulsar.Function classes
// and plain functions from .py, .zip and .whl packages. It serves the
// InstanceControl gRPC service on 127.0.0.1:--port and Prometheus metrics
// on --metrics_port, keeps state through the worker's HTTP state API
// (--state_storage_serviceurl), and exits 0 on SIGTERM after closing its
// consumers and producers. Start-up failures end in a non-zero exit with
// the traceback and a one-line summary as the last lines of stderr.
// magnetar_instance/__init__.py lists its modules; requirements.txt pins
// its Python packages (pulsar-client, protobuf and h2 at run time).
//
// This Go package embeds those sources (not the tests) so a worker binary
// carries them. Extract writes them under a directory, in a subdirectory
// named by their content hash: workers of different versions, and
// concurrent workers, never share or overwrite each other's files, and
// extracting again is a no-op. The worker runs
//
//	python3 <Extract's path> --py ... --function_details '...' ...
//
// Callers: the function worker's process runtime. Extract is safe to call
// from several goroutines and processes at once (files are written to a
// temporary directory that is renamed into place).
package pyinstance
