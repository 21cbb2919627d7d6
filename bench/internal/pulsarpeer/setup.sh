#!/usr/bin/env bash
# setup.sh lays out the "Pulsar home" the benchmarks run the real Apache
# Pulsar 4.2.4 standalone from: the runtime closure of pulsar-broker 4.2.4,
# resolved from Maven Central through ~/.m2 by pom.xml beside this script.
#
#   bench/internal/pulsarpeer/setup.sh [HOME_DIR]
#
# HOME_DIR defaults to $MAGNETAR_PULSAR_HOME, else
# $HOME/.cache/magnetar/pulsar-4.2.4. The last line on stdout is the home's
# path; progress goes to stderr. Layout (package pulsarpeer reads it):
#
#   lib/       every runtime jar (java -cp 'lib/*'); PulsarStandaloneStarter
#              is in pulsar-broker-4.2.4.jar
#   VERSION    pulsar=4.2.4, the jar count and a fingerprint of this script
#              and pom.xml; a home without it is incomplete
#
# Idempotent and fast when done: a home whose VERSION carries this
# fingerprint and whose lib/ holds the jars it counts is left alone (no
# Maven run). Otherwise Maven copies the jars offline first (mvn -o), then
# online; the new home is built beside the old one and renamed into place,
# so a reader never sees a half-written home.
#
# Needs: bash, mvn (3.8+), java (17+), sha256sum.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
home=${1:-${MAGNETAR_PULSAR_HOME:-$HOME/.cache/magnetar/pulsar-4.2.4}}
while [[ $home == */ && $home != / ]]; do home=${home%/}; done
mkdir -p "$(dirname "$home")"
home=$(cd "$(dirname "$home")" && pwd)/$(basename "$home")
mvn_bin=${MVN:-mvn}
dependency_plugin=org.apache.maven.plugins:maven-dependency-plugin:3.6.1

log() { printf 'pulsarpeer setup: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

fingerprint=$(cat "$here/setup.sh" "$here/pom.xml" | sha256sum | cut -d' ' -f1)

# up_to_date succeeds when $home was laid out from these very files and
# lib/ still holds as many jars as were copied.
up_to_date() {
  local version=$home/VERSION want have
  [[ -f $version && -f $home/lib/pulsar-broker-4.2.4.jar ]] || return 1
  grep -qx "fingerprint=$fingerprint" "$version" || return 1
  want=$(sed -n 's/^jars=//p' "$version")
  have=$(find "$home/lib" -maxdepth 1 -name '*.jar' | wc -l)
  [[ -n $want && $want == "$have" ]]
}

if up_to_date; then
  log "$home is up to date"
  printf '%s\n' "$home"
  exit 0
fi

command -v "$mvn_bin" >/dev/null || die "mvn not found (install Maven 3.8+)"

stage=$(mktemp -d "$home.tmp.XXXXXX")
trap 'rm -rf "$stage"' EXIT
out=$stage/home
mkdir -p "$out/lib"

copy() {
  "$mvn_bin" -B -q "$@" -f "$here/pom.xml" "$dependency_plugin:copy-dependencies" \
    -DincludeScope=runtime -DoutputDirectory="$out/lib" \
    >"$stage/mvn.log" 2>&1
}
log "copying the pulsar-broker 4.2.4 closure with Maven (offline)"
if ! copy -o; then
  log "offline resolution failed; resolving online (downloads into ~/.m2, ~250 MB)"
  rm -rf "$out/lib" && mkdir -p "$out/lib"
  if ! copy; then
    tail -n 40 "$stage/mvn.log" >&2
    die "Maven could not resolve $here/pom.xml"
  fi
fi
[[ -f $out/lib/pulsar-broker-4.2.4.jar ]] || die "Maven copied no pulsar-broker-4.2.4.jar into lib/"
jars=$(find "$out/lib" -maxdepth 1 -name '*.jar' | wc -l)

# VERSION last: its presence marks a complete home.
{
  printf 'pulsar=4.2.4\n'
  printf 'jars=%d\n' "$jars"
  printf 'fingerprint=%s\n' "$fingerprint"
} >"$out/VERSION"

if [[ -e $home ]]; then
  old=$(mktemp -d "$home.old.XXXXXX")
  mv "$home" "$old/"
  mv "$out" "$home"
  rm -rf "$old"
else
  mv "$out" "$home"
fi
log "laid out $home ($jars jars)"
printf '%s\n' "$home"
