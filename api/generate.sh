#!/usr/bin/env bash
# Regenerates the Go code for every .proto under api/. Run by `make generate`
# (through `go generate ./...` and the //go:generate line in
# api/pulsarwire/doc.go); safe to run by hand from anywhere.
#
# Tools:
#   protoc          from the system (Debian: protobuf-compiler); installed with
#                   apt-get when missing and we are root.
#   protoc-gen-go   pinned to the google.golang.org/protobuf version in go.mod,
#                   built into bin/tools/protoc-gen-go@<version>/ (ignored by git).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"

if ! command -v protoc >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "generate: installing protoc (protobuf-compiler)" >&2
		apt-get install -y protobuf-compiler >/dev/null ||
			{ apt-get update >/dev/null && apt-get install -y protobuf-compiler >/dev/null; }
	else
		echo "generate: protoc not found; install protobuf-compiler (Debian/Ubuntu) or protoc from https://github.com/protocolbuffers/protobuf/releases" >&2
		exit 1
	fi
fi

version="$("$GO" list -m -f '{{.Version}}' google.golang.org/protobuf)"
tooldir="$root/bin/tools/protoc-gen-go@$version"
plugin="$tooldir/protoc-gen-go"
if [ ! -x "$plugin" ]; then
	echo "generate: building protoc-gen-go $version" >&2
	mkdir -p "$tooldir"
	GOBIN="$tooldir" "$GO" install "google.golang.org/protobuf/cmd/protoc-gen-go@$version"
fi

# Paths are given relative to the module root, so each file registers under
# its repository path (e.g. api/pulsarwire/pulsarwire.proto), which cannot
# clash with another project's copy of the same protocol.
mapfile -t protos < <(find api -name '*.proto' | sort)
protoc \
	--plugin="protoc-gen-go=$plugin" \
	-I . \
	--go_out=. --go_opt=paths=source_relative \
	"${protos[@]}"
