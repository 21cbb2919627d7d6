#!/usr/bin/env bash
# Installs the Consul agent used by the tests of regions/discovery/consul as
# $(go env GOPATH)/bin/consul, built from the Go module proxy.
#
# Only Consul v1.16.0-v1.16.3 are MPL-2.0; later releases are under the BUSL
# and must not be used. `go install github.com/hashicorp/consul@v1.16.3` is
# refused because Consul's go.mod has replace directives, so the binary is
# built inside a throwaway wrapper module kept in a cache directory (never in
# this repository's go.mod). The wrapper repeats Consul's two exclude lines
# for go-msgpack, without which the module graph selects a version Consul
# does not build with.
#
# Idempotent: when the installed binary already reports the pinned version it
# does nothing. A cold build takes about ten minutes on two cores; the Go
# build cache makes a rebuild take seconds.
#
# Environment:
#   CONSUL_VERSION      version to build (default v1.16.3; must stay <= v1.16.3)
#   CONSUL_WRAPPER_DIR  wrapper module directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/magnetar/consul-<version>)
#   CONSUL_INSTALL_DIR  where the binary goes (default $(go env GOPATH)/bin)
set -euo pipefail

version="${CONSUL_VERSION:-v1.16.3}"
case "$version" in
v1.16.[0-3]) ;;
*)
	echo "setup.sh: Consul $version is not one of the MPL-2.0 releases v1.16.0-v1.16.3" >&2
	exit 2
	;;
esac

install_dir="${CONSUL_INSTALL_DIR:-$(go env GOPATH)/bin}"
bin="$install_dir/consul"
want="Consul ${version}"

if [ -x "$bin" ] && [ "$("$bin" version 2>/dev/null | head -n1)" = "$want" ]; then
	echo "consul ${version} already installed at $bin"
	exit 0
fi

wrapper="${CONSUL_WRAPPER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/magnetar/consul-${version}}"
mkdir -p "$wrapper" "$install_dir"
cd "$wrapper"

# The wrapper is rebuilt from scratch each time so that a half-written go.mod
# from an interrupted run cannot poison the next one; the module cache and
# build cache carry the expensive parts.
rm -f go.mod go.sum
cat >go.mod <<MOD
module magnetar.invalid/consulbuild

go 1.26

exclude github.com/hashicorp/go-msgpack v1.1.5

exclude github.com/hashicorp/go-msgpack v1.1.6
MOD

# The GOFLAGS of the caller (for instance -mod=vendor or -race) must not
# leak into the wrapper's build.
export GOFLAGS=-mod=mod
export CGO_ENABLED=0
go get "github.com/hashicorp/consul@${version}"

# The binary's version comes from the VERSION file embedded in the module,
# so `consul version` reports the tag without any -X flags. It is written
# under a temporary name and renamed so an interrupted build never leaves a
# truncated binary where the tests look for one.
tmp="$install_dir/.consul.$$"
trap 'rm -f "$tmp"' EXIT
go build -trimpath -ldflags "-s -w" -o "$tmp" github.com/hashicorp/consul
mv -f "$tmp" "$bin"
"$bin" version | head -n1
