#!/usr/bin/env bash
# setup.sh lays out Magnetar's "functions home": what the functions worker
# needs to start Apache Pulsar's Java function instance (4.2.4) as a child
# process, resolved from Maven Central through ~/.m2 by pom.xml beside this
# script.
#
#   dataplane/functions/javainstance/setup.sh [HOME_DIR]
#
# HOME_DIR defaults to $MAGNETAR_FUNCTIONS_HOME, else
# $HOME/.cache/magnetar/functions-4.2.4. The last line on stdout is the home's
# path; progress goes to stderr. Layout (package javainstance reads it):
#
#   java-instance.jar          empty "pathing" jar: its manifest Class-Path
#                              lists the 4.2.4 root jars, then
#                              pulsar-functions-runtime-all 4.0.8 (JavaInstanceMain)
#   instance-classpath.txt     one line: the colon-separated instance class
#                              path (-Dpulsar.functions.instance.classpath)
#   java_instance_log4j2.xml   log4j2 configuration: file and stdout
#   connectors/                pulsar-io-data-generator-4.0.8.nar,
#                              pulsar-io-jdbc-postgres-4.0.8.nar (symlinks)
#   examples/                  pulsar-functions-api-examples-4.0.8.jar (symlink)
#   VERSION                    versions and a fingerprint; a home without it
#                              is incomplete
#
# Idempotent: a home whose VERSION carries the fingerprint of this script,
# pom.xml and the log4j2 file, and whose files in ~/.m2 are all present, is
# left alone (no Maven run). Otherwise Maven resolves offline first (mvn -o),
# then online; the new home is built beside the old one and renamed into
# place, so readers never see a half-written home.
#
# Needs: bash, mvn, java and jar (JDK 17+), sha256sum.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
home=${1:-${MAGNETAR_FUNCTIONS_HOME:-$HOME/.cache/magnetar/functions-4.2.4}}
while [[ $home == */ && $home != / ]]; do home=${home%/}; done
mkdir -p "$(dirname "$home")"
home=$(cd "$(dirname "$home")" && pwd)/$(basename "$home")
mvn_bin=${MVN:-mvn}
dependency_plugin=org.apache.maven.plugins:maven-dependency-plugin:3.6.1

log() { printf 'javainstance setup: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The root class loader's jars, in manifest order (groupId:artifactId). Their
# versions are pinned in pom.xml.
root_jars=(
  org.apache.pulsar:pulsar-io-core
  org.apache.pulsar:pulsar-functions-api
  org.apache.pulsar:pulsar-client-admin-api
  org.apache.pulsar:pulsar-client-api
  org.apache.avro:avro
  com.fasterxml.jackson.core:jackson-core
  com.fasterxml.jackson.core:jackson-databind
  com.fasterxml.jackson.core:jackson-annotations
  org.apache.commons:commons-compress
  com.google.code.findbugs:jsr305
  com.google.guava:guava
  com.google.guava:failureaccess
  com.google.code.gson:gson
  org.slf4j:slf4j-api
  org.apache.logging.log4j:log4j-slf4j2-impl
  org.apache.logging.log4j:log4j-api
  org.apache.logging.log4j:log4j-core
  org.apache.commons:commons-lang3
  commons-codec:commons-codec
  commons-io:commons-io
  com.google.protobuf:protobuf-java
)
runtime_all=org.apache.pulsar:pulsar-functions-runtime-all
# groupId:artifactId -> file name in the home.
declare -A connectors=(
  [org.apache.pulsar:pulsar-io-data-generator]=pulsar-io-data-generator-4.0.8.nar
  [org.apache.pulsar:pulsar-io-jdbc-postgres]=pulsar-io-jdbc-postgres-4.0.8.nar
)
declare -A examples=(
  [org.apache.pulsar:pulsar-functions-api-examples]=pulsar-functions-api-examples-4.0.8.jar
)

fingerprint=$(cat "$here/setup.sh" "$here/pom.xml" "$here/java_instance_log4j2.xml" | sha256sum | cut -d' ' -f1)

# up_to_date succeeds when $home was laid out from these very files and every
# file it points into ~/.m2 is still there.
up_to_date() {
  local version=$home/VERSION line entry
  [[ -f $version && -f $home/java-instance.jar && -f $home/java_instance_log4j2.xml && -s $home/instance-classpath.txt ]] || return 1
  grep -qx "fingerprint=$fingerprint" "$version" || return 1
  while IFS= read -r line; do
    case $line in
      root_jar=*) [[ -f ${line#root_jar=} ]] || return 1 ;;
    esac
  done <"$version"
  IFS=: read -r -a entries <"$home/instance-classpath.txt"
  for entry in "${entries[@]}"; do
    [[ -f $entry ]] || return 1
  done
  for entry in "$home"/connectors/* "$home"/examples/*; do
    [[ -f $entry ]] || return 1
  done
}

if up_to_date; then
  log "$home is up to date"
  printf '%s\n' "$home"
  exit 0
fi

command -v "$mvn_bin" >/dev/null || die "mvn not found (install Maven 3.8+)"
command -v jar >/dev/null || die "jar not found (install a JDK 17+)"

stage=$(mktemp -d "$home.tmp.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# resolve writes Maven's resolved dependency list, with absolute file names,
# to $stage/deps.txt.
resolve() {
  "$mvn_bin" -B -q "$@" -f "$here/pom.xml" "$dependency_plugin:list" \
    -DoutputAbsoluteArtifactFilename=true -DoutputFile="$stage/deps.txt" \
    >"$stage/mvn.log" 2>&1
}
log "resolving pom.xml with Maven (offline)"
if ! resolve -o; then
  log "offline resolution failed; resolving online (downloads into ~/.m2)"
  if ! resolve; then
    tail -n 40 "$stage/mvn.log" >&2
    die "Maven could not resolve $here/pom.xml"
  fi
fi

# deps.txt lines look like
#   group:artifact:type[:classifier]:version:scope:/abs/path.jar -- module x
declare -A path_of
instance_cp=()
while IFS= read -r line; do
  line=${line#"${line%%[![:space:]]*}"}
  [[ $line == *:/* ]] || continue
  coords=${line%%:/*}
  file=/${line#*:/}
  file=${file%% -- *}
  scope=${coords##*:}
  group=${coords%%:*}
  artifact=${coords#*:}
  artifact=${artifact%%:*}
  key=$group:$artifact
  [[ -f $file ]] || die "Maven listed $coords at $file, which does not exist"
  path_of[$key]=$file
  case $scope in
    compile | runtime) instance_cp+=("$file") ;;
  esac
done <"$stage/deps.txt"
((${#instance_cp[@]} > 0)) || die "no instance class path in Maven's output ($stage/deps.txt)"

# urlpath turns an absolute path into a file: URL for a manifest Class-Path.
urlpath() {
  local p=${1//%/%25}
  p=${p// /%20}
  printf 'file:%s' "$p"
}

class_path=""
root_paths=()
for key in "${root_jars[@]}" "$runtime_all"; do
  file=${path_of[$key]:-}
  [[ -n $file ]] || die "$key is missing from Maven's resolution of pom.xml"
  root_paths+=("$file")
  class_path+="${class_path:+ }$(urlpath "$file")"
done

# A manifest line may hold at most 72 bytes; longer values continue on lines
# that start with one space. The jar tool rewrites (and re-wraps) what it reads.
{
  printf 'Manifest-Version: 1.0\r\n'
  printf 'Created-By: magnetar dataplane/functions/javainstance/setup.sh\r\n'
  header="Class-Path: "
  first=$((72 - ${#header}))
  printf '%s%s\r\n' "$header" "${class_path:0:first}"
  rest=${class_path:first}
  while [[ -n $rest ]]; do
    printf ' %s\r\n' "${rest:0:71}"
    rest=${rest:71}
  done
} >"$stage/MANIFEST.MF"

out=$stage/home
mkdir -p "$out/connectors" "$out/examples"
jar --create --file "$out/java-instance.jar" --manifest "$stage/MANIFEST.MF"
(
  IFS=:
  printf '%s\n' "${instance_cp[*]}"
) >"$out/instance-classpath.txt"
cp "$here/java_instance_log4j2.xml" "$out/java_instance_log4j2.xml"
for key in "${!connectors[@]}"; do
  file=${path_of[$key]:-}
  [[ -n $file ]] || die "$key is missing from Maven's resolution of pom.xml"
  ln -s "$file" "$out/connectors/${connectors[$key]}"
done
for key in "${!examples[@]}"; do
  file=${path_of[$key]:-}
  [[ -n $file ]] || die "$key is missing from Maven's resolution of pom.xml"
  ln -s "$file" "$out/examples/${examples[$key]}"
done

# VERSION last: its presence marks a complete home.
{
  printf 'pulsar-functions-runtime=4.2.4\n'
  printf 'pulsar-functions-runtime-all=4.0.8\n'
  printf 'connectors=4.0.8\n'
  printf 'examples=4.0.8\n'
  printf 'instance-classpath-jars=%d\n' "${#instance_cp[@]}"
  printf 'fingerprint=%s\n' "$fingerprint"
  for file in "${root_paths[@]}"; do
    printf 'root_jar=%s\n' "$file"
  done
} >"$out/VERSION"

# Swap the new home into place.
if [[ -e $home ]]; then
  old=$(mktemp -d "$home.old.XXXXXX")
  mv "$home" "$old/"
  mv "$out" "$home"
  rm -rf "$old"
else
  mv "$out" "$home"
fi
log "laid out $home (${#instance_cp[@]} jars on the instance class path)"
printf '%s\n' "$home"
