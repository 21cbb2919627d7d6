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
#   protoc-gen-go-grpc            pinned below (its own module, not in go.mod).
#   protoc-gen-grpc-gateway,
#   protoc-gen-openapiv2          pinned to the github.com/grpc-ecosystem/grpc-gateway/v2
#                                 version in go.mod.
# All plugins are built into bin/tools/<plugin>@<version>/.
#
# Outputs: api/pulsarwire (Go messages only) and api/controlplane/v1 (Go
# messages, gRPC services, grpc-gateway handlers and one merged OpenAPI v2
# document, controlplane.swagger.json, whose title and security scheme come
# from openapi.yaml) and the OpenAPI 3 document controlplane.openapi3.json,
# written by api/openapi3gen from a descriptor set with source info (so
# comments become descriptions), gateway.yaml and openapi.yaml's info. The control-plane API's HTTP mapping is
# api/controlplane/v1/gateway.yaml (grpc_api_configuration), so the .proto
# files import only protoc's well-known types.
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

# build_tool NAME PACKAGE VERSION: builds PACKAGE@VERSION into
# bin/tools/NAME@VERSION/ once and prints the binary's path.
build_tool() {
	local name="$1" pkg="$2" version="$3"
	local dir="$root/bin/tools/$name@$version"
	if [ ! -x "$dir/$name" ]; then
		echo "generate: building $name $version" >&2
		mkdir -p "$dir"
		GOBIN="$dir" "$GO" install "$pkg@$version"
	fi
	echo "$dir/$name"
}

protobuf_version="$("$GO" list -m -f '{{.Version}}' google.golang.org/protobuf)"
gateway_version="$("$GO" list -m -f '{{.Version}}' github.com/grpc-ecosystem/grpc-gateway/v2)"
go_grpc_version="v1.6.2"

plugin_go="$(build_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$protobuf_version")"
plugin_go_grpc="$(build_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$go_grpc_version")"
plugin_gateway="$(build_tool protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway "$gateway_version")"
plugin_openapi="$(build_tool protoc-gen-openapiv2 github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2 "$gateway_version")"

# Paths are given relative to the module root, so each file registers under
# its repository path (e.g. api/pulsarwire/pulsarwire.proto), which cannot
# clash with another project's copy of the same protocol.
mapfile -t wire_protos < <(find api/pulsarwire -name '*.proto' | sort)
protoc \
	--plugin="protoc-gen-go=$plugin_go" \
	-I . \
	--go_out=. --go_opt=paths=source_relative \
	"${wire_protos[@]}"

# Pulsar Functions' worker-to-instance protocol: Go messages and the
# InstanceControl gRPC service. The proto package is "proto" (the service's
# wire name), so the files register under their repository paths only.
mapfile -t fn_protos < <(find api/pulsarfunctions -name '*.proto' | sort)
protoc \
	--plugin="protoc-gen-go=$plugin_go" \
	--plugin="protoc-gen-go-grpc=$plugin_go_grpc" \
	-I . \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	"${fn_protos[@]}"
# The same files as Python modules for our Python instance
# (dataplane/functions/pyinstance), when grpcio-tools is installed (pinned in
# its requirements.txt); the checked-in modules are otherwise left as they are.
py_out=dataplane/functions/pyinstance/magnetar_instance/pb
if python3 -c 'import grpc_tools.protoc' >/dev/null 2>&1; then
	tmp_py="$(mktemp -d)"
	python3 -m grpc_tools.protoc -I api/pulsarfunctions \
		--python_out="$tmp_py" --grpc_python_out="$tmp_py" \
		function.proto instance.proto
	# grpc_tools writes "import instance_pb2"; make the imports package-relative.
	sed -i -e 's/^import \(function_pb2\|instance_pb2\) as/from . import \1 as/' "$tmp_py"/*.py
	mkdir -p "$py_out"
	cp "$tmp_py"/*.py "$py_out"/
	rm -rf "$tmp_py"
else
	echo "generate: grpcio-tools not installed: $py_out left as it is" >&2
fi

cp_dir=api/controlplane/v1
cp_http="$cp_dir/gateway.yaml"
mapfile -t cp_protos < <(find "$cp_dir" -name '*.proto' | sort)
protoc \
	--plugin="protoc-gen-go=$plugin_go" \
	--plugin="protoc-gen-go-grpc=$plugin_go_grpc" \
	--plugin="protoc-gen-grpc-gateway=$plugin_gateway" \
	--plugin="protoc-gen-openapiv2=$plugin_openapi" \
	-I . \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	--grpc-gateway_out=. \
	--grpc-gateway_opt=paths=source_relative,grpc_api_configuration="$cp_http" \
	--openapiv2_out="$cp_dir" \
	--openapiv2_opt=grpc_api_configuration="$cp_http",openapi_configuration="$cp_dir/openapi.yaml",allow_merge=true,merge_file_name=controlplane,disable_default_errors=false \
	"${cp_protos[@]}"

# The OpenAPI 3 document: protoc writes the descriptors (with comments and
# every import), api/openapi3gen turns them and the HTTP rules into JSON.
descriptor_set="$(mktemp)"
trap 'rm -f "$descriptor_set"' EXIT
protoc -I . --include_imports --include_source_info --descriptor_set_out="$descriptor_set" "${cp_protos[@]}"
"$GO" run ./api/openapi3gen -descriptors "$descriptor_set" -http "$cp_http" -info "$cp_dir/openapi.yaml" -out "$cp_dir/controlplane.openapi3.json"
