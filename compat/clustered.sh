#!/usr/bin/env bash
# Runs the Apache Pulsar Go client's multi-broker tests (the suites behind
# its `clustered` build tag, milestone M10 in docs/compatibility.md) against a
# real Magnetar cluster started here: one `magnetar metadata` (etcd) member,
# three bookies and two brokers. The suites dial the compose host name
# `broker-1` (ports 6650, and 6600 which must refuse), so broker-1 must
# resolve to 127.0.0.1; as root this script adds it to /etc/hosts.
#
#   make compat-clustered        (or: GO=go compat/clustered.sh)
#
# Uses 127.0.0.1:6650/6651 and :8080/:8081; nothing else may hold them.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
VERSION=$($GO list -m -f '{{.Version}}' github.com/apache/pulsar-client-go)
WORK=${COMPAT_WORK:-${TMPDIR:-/tmp}/magnetar-compat}
RUN='^(TestClientClusteredTestSuite|TestReaderClusteredTestSuite|TestTransactionDisabled)$'

if ! getent hosts broker-1 | grep -q '^127\.'; then
	if [ "$(id -u)" = 0 ]; then
		echo "127.0.0.1 broker-1" >>/etc/hosts
	else
		echo "clustered.sh: broker-1 must resolve to 127.0.0.1 (add it to /etc/hosts)" >&2
		exit 1
	fi
fi

echo "== building bin/magnetar"
$GO build -o bin/magnetar ./cmd/magnetar
BIN=$PWD/bin/magnetar

echo "== copying github.com/apache/pulsar-client-go@$VERSION and building pulsar-clustered.test"
DIR=$($GO mod download -json "github.com/apache/pulsar-client-go@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
mkdir -p "$WORK"
if [ ! -f "$WORK/upstream/.copied-$VERSION" ]; then
	rm -rf "$WORK/upstream"
	cp -r "$DIR" "$WORK/upstream"
	chmod -R u+w "$WORK/upstream"
	touch "$WORK/upstream/.copied-$VERSION"
fi
(
	cd "$WORK/upstream"
	export GOFLAGS=-mod=mod GOWORK=off
	$GO test -c -race -tags clustered -o pulsar-clustered.test ./pulsar
)

T=$(mktemp -d "${TMPDIR:-/tmp}/magnetar-clustered.XXXXXX")
pids=()
cleanup() {
	# Brokers and bookies first, the metadata store last; SIGKILL whatever
	# is still running 15 s later.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
	for _ in $(seq 1 75); do
		alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ "$alive" = 0 ] && break
		sleep 0.2
	done
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {
	for _ in $(seq 1 300); do
		curl -fsS "$1" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "clustered.sh: $1 did not answer" >&2
	return 1
}

echo "== starting etcd, 3 bookies, 2 brokers (logs in $T)"
CP=$(free_port); PP=$(free_port)
"$BIN" metadata --name m1 --data-dir "$T/m1" --listen-client-url "http://127.0.0.1:$CP" \
	--listen-peer-url "http://127.0.0.1:$PP" >"$T/metadata.log" 2>&1 &
pids+=($!)
MD=http://127.0.0.1:$CP
wait_http "$MD/health"
for i in 1 2 3; do
	"$BIN" bookie --data-dir "$T/b$i" --listen "127.0.0.1:$(free_port)" --metadata "$MD" >"$T/bookie-$i.log" 2>&1 &
	pids+=($!)
done
for i in 0 1; do
	"$BIN" broker --metadata "$MD" --broker-addr "127.0.0.1:665$i" --advertised-address "broker-1:665$i" \
		--http-addr "127.0.0.1:808$i" --advertised-http-url "http://broker-1:808$i" >"$T/broker-$i.log" 2>&1 &
	pids+=($!)
done
wait_http http://127.0.0.1:8080/admin/v2/brokers/health
wait_http http://127.0.0.1:8081/admin/v2/brokers/health

echo "== running $RUN"
status=0
(cd "$WORK/upstream/pulsar" && ../pulsar-clustered.test -test.run "$RUN" -test.v -test.timeout 5m) || status=$?
if [ "$status" != 0 ]; then
	tail -n 50 "$T"/broker-*.log >&2
fi
exit "$status"
