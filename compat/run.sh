#!/usr/bin/env bash
# Runs the Apache Pulsar Go client's integration tests against a Magnetar
# standalone and writes docs/compatibility.md. See compat/README.md.
#
# Environment:
#   COMPAT_RUN=regex        only tests whose name matches
#   COMPAT_GROUPS=M1,M2     only these milestones ("all": every group, even M7/M10/X)
#   COMPAT_MODE=both        "each": one process per test; "group": one process per
#                           group in upstream's file order against one fresh broker,
#                           as upstream CI runs them; "both": each, then group
#   COMPAT_TIMEOUT=60s      -test.timeout of each test (mode each)
#   COMPAT_GROUP_TIMEOUT=20m -test.timeout of each group's process (mode group)
#   COMPAT_RESTART_EVERY=25 fresh broker after this many tests
#   COMPAT_BUDGET=55m       stop starting tests after this long (0: no limit)
#   COMPAT_OUT=dir          logs, broker data, results.json (default: a new temp dir)
#   COMPAT_REPORT=file      report path (default: docs/compatibility.md for a full
#                           run, $COMPAT_OUT/compatibility.md when COMPAT_RUN or
#                           COMPAT_GROUPS selects a subset)
#   COMPAT_WORK=dir         where the upstream module is copied and its tests are
#                           built (default: ${TMPDIR:-/tmp}/magnetar-compat; reused)
#   COMPAT_BROKER_FLAGS=... extra `magnetar standalone` flags
#                           (default: --max-message-size 1048576, as upstream CI)
#   PULSAR_CLIENT_GO_VERSION=v0.19.0
set -euo pipefail

GO=${GO:-go}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

VERSION=${PULSAR_CLIENT_GO_VERSION:-v0.19.0}
WORK=${COMPAT_WORK:-${TMPDIR:-/tmp}/magnetar-compat}
OUT=${COMPAT_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/magnetar-compat-out.XXXXXX")}
mkdir -p "$OUT"

if ! getent hosts localhost | grep -q '^127\.0\.0\.1'; then
	echo "run.sh: 'localhost' must resolve to 127.0.0.1 (the suite dials localhost:6650/8080); check /etc/hosts" >&2
	exit 1
fi

echo "== building bin/magnetar and compatrun"
$GO build -o bin/magnetar ./cmd/magnetar
# The run restarts the broker many times; use a copy so a rebuild of
# bin/magnetar meanwhile does not change the broker under test.
cp bin/magnetar "$OUT/magnetar"
$GO build -o "$OUT/compatrun" ./compat/cmd/compatrun

echo "== copying github.com/apache/pulsar-client-go@$VERSION to $WORK/upstream"
DIR=$($GO mod download -json "github.com/apache/pulsar-client-go@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
if [ -z "$DIR" ] || [ ! -d "$DIR" ]; then
	echo "run.sh: go mod download gave no Dir for pulsar-client-go@$VERSION" >&2
	exit 1
fi
mkdir -p "$WORK"
if [ ! -f "$WORK/upstream/.copied-$VERSION" ]; then
	rm -rf "$WORK/upstream"
	cp -r "$DIR" "$WORK/upstream"
	chmod -R u+w "$WORK/upstream"
	touch "$WORK/upstream/.copied-$VERSION"
fi

echo "== building the upstream test binaries (pulsar.test with -race)"
(
	cd "$WORK/upstream"
	# Outside our module: the upstream go.mod and the proxy decide its deps.
	export GOFLAGS=-mod=mod GOWORK=off
	$GO test -c -race -o pulsar.test ./pulsar
	$GO test -c -o admin.test ./pulsaradmin/pkg/admin
)

REPORT=${COMPAT_REPORT:-}
if [ -z "$REPORT" ]; then
	if [ -n "${COMPAT_RUN:-}" ] || [ -n "${COMPAT_GROUPS:-}" ]; then
		REPORT=$OUT/compatibility.md
	else
		REPORT=$ROOT/docs/compatibility.md
	fi
fi

CMD="make compat"
for v in COMPAT_RUN COMPAT_GROUPS COMPAT_MODE COMPAT_TIMEOUT COMPAT_GROUP_TIMEOUT COMPAT_RESTART_EVERY COMPAT_BUDGET COMPAT_BROKER_FLAGS; do
	if [ -n "${!v:-}" ]; then CMD="$v='${!v}' $CMD"; fi
done

echo "== running (logs in $OUT)"
exec "$OUT/compatrun" \
	-upstream "$WORK/upstream" \
	-upstream-version "$VERSION" \
	-magnetar "$OUT/magnetar" \
	-out "$OUT" \
	-report "$REPORT" \
	-repo "$ROOT" \
	-command "$CMD" \
	-groups "${COMPAT_GROUPS:-}" \
	-run "${COMPAT_RUN:-}" \
	-mode "${COMPAT_MODE:-both}" \
	-timeout "${COMPAT_TIMEOUT:-60s}" \
	-group-timeout "${COMPAT_GROUP_TIMEOUT:-20m}" \
	-restart-every "${COMPAT_RESTART_EVERY:-25}" \
	-budget "${COMPAT_BUDGET:-55m}" \
	-broker-flags "${COMPAT_BROKER_FLAGS:---max-message-size 1048576}" \
	-v
