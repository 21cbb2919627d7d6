// Package cli is the control-plane command line: the magnetar subcommands
// org, region, serviceaccount, apikey, rolebinding, cluster, tenant,
// namespace, topic and operation, which drive the control-plane API
// (api/controlplane/v1) over gRPC.
//
// It owns the cobra commands (Constructors, registered by cmd/magnetar),
// the mapping of command-line resource paths to AIP resource names, text
// tables and JSON output, and the wait loop with its progress display for
// long-running operations. It holds no state between invocations.
//
// # Usage
//
//	export MAGNETAR_ENDPOINT=127.0.0.1:7080            # the default
//	export MAGNETAR_API_KEY_FILE=data/up/bootstrap.key # or --api-key / MAGNETAR_API_KEY
//	magnetar org create acme --display-name "Acme"
//	magnetar cluster create acme dev --region local-a --brokers 1 --bookies 1
//	magnetar cluster get acme/dev                      # STATE READY, SERVICE URL pulsar://...
//	magnetar tenant create acme/dev/shop
//	magnetar namespace create acme/dev/shop/orders --retention-minutes 60 --retention-mb 100 --message-ttl 1h
//	magnetar topic create acme/dev/shop/orders/payments --partitions 3
//	magnetar topic list acme/dev/shop/orders -o json
//
// Resources are named by the path of their ids (ORG/CLUSTER/TENANT/NS/TOPIC),
// as one argument or as separate arguments, or by their full resource name
// (organizations/acme/clusters/dev). Regions and operations are named by
// their id or full name (local-a, regions/local-a).
//
// Global flags on every command: --endpoint (env MAGNETAR_ENDPOINT; an
// https:// prefix selects TLS), --api-key (env MAGNETAR_API_KEY),
// --api-key-file (env MAGNETAR_API_KEY_FILE), --output text|json (json is the
// protobuf JSON of the response; lists are merged across pages) and
// --timeout (whole command, waiting included).
//
// cluster create, update and delete start an operation and wait for it by
// calling WaitOperation with a short server-side timeout in a loop. Progress
// goes to stderr: on a terminal one line is redrawn (spinner, operation type,
// target, state, elapsed); otherwise one line is printed per state change.
// A FAILED or CANCELLED operation makes the command fail with the
// operation's error. --no-wait prints the operation instead; follow it with
// "magnetar operation wait ID".
//
// Errors from the API are printed as the gRPC code and message, e.g.
// "magnetar: PERMISSION_DENIED: ...". Wrong arguments return a usage error.
//
// # Concurrency
//
// A command runs on the calling goroutine. While waiting on a terminal, the
// progress display runs one redraw goroutine, which the wait stops and waits
// for before returning. Commands are built fresh per process (or per test):
// flag values live in the constructors' closures, so one command tree must
// not be executed concurrently.
package cli
