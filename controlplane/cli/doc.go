// Package cli is the control-plane command line: the magnetar subcommands
// org, region, user, serviceaccount, apikey, rolebinding, cluster, tenant,
// namespace, topic, function, source, sink (functions.go), operation,
// audit, usage, invoice, pricebook, budget, group and runbook, which drive the control-plane API (api/controlplane/v1)
// over gRPC.
//
// topic list, produce, consume, peek and stats also talk to the topic's
// cluster (dataplane.go): produce and consume with the Pulsar Go client on
// the cluster's service URL, peek, stats and the listing of topics clients
// created through Pulsar's admin REST API on its admin URL
// (regions/pulsaradmin). Both URLs come from the Cluster resource unless
// --service-url and --admin-url give them (then no API key is needed).
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
//	magnetar cluster get acme/dev                      # STATE READY, SERVICE URL pulsar+ssl://...
//	magnetar tenant create acme/dev/shop
//	magnetar namespace create acme/dev/shop/orders --retention-minutes 60 --retention-mb 100 --message-ttl 1h
//	magnetar topic create acme/dev/shop/orders/payments --partitions 3
//	magnetar namespace update acme/dev/shop/orders --message-ttl 30m --unset retention
//	magnetar topic update acme/dev/shop/orders/payments --partitions 6
//	magnetar topic list acme/dev/shop/orders -o json    # managed and client-created topics
//	magnetar topic produce acme/dev/shop/orders/payments -m hello -k k1
//	magnetar topic consume acme/dev/shop/orders/payments -s sub -n 1
//	magnetar topic peek acme/dev/shop/orders/payments -s sub -n 10
//	magnetar topic stats acme/dev/shop/orders/payments
//	magnetar audit list acme --last 20
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
// A command runs on the calling goroutine; produce and consume also run the
// Pulsar client's goroutines, which closing the client stops. While waiting on a terminal, the
// progress display runs one redraw goroutine, which the wait stops and waits
// for before returning. Commands are built fresh per process (or per test):
// flag values live in the constructors' closures, so one command tree must
// not be executed concurrently.
package cli
