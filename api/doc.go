// Package api owns Magnetar's wire and API definitions: the .proto sources
// and the Go code generated from them. Nothing here is written by hand except
// the .proto files, the HTTP and OpenAPI settings (*.yaml), the package docs,
// controlplane/v1/openapi.go and limits.go (the free-text length limits),
// the OpenAPI 3 generator openapi3gen, the tests and generate.sh.
//
//   - pulsarwire: the Apache Pulsar binary protocol messages (the broker's
//     client-facing port), written from the protocol's published field
//     numbers and types.
//   - controlplane/v1: the control-plane API (package
//     magnetar.controlplane.v1): resources, gRPC services, the HTTP/JSON
//     mapping for grpc-gateway (gateway.yaml), the generated gateway handlers,
//     one merged OpenAPI v2 document (controlplane.swagger.json) and the
//     OpenAPI 3 document (controlplane.openapi3.json, by openapi3gen).
//
// `make generate` (go generate ./...) runs generate.sh, which regenerates
// every generated file under api/ with protoc and pinned plugins:
// protoc-gen-go (the google.golang.org/protobuf version in go.mod),
// protoc-gen-go-grpc (pinned in generate.sh), protoc-gen-grpc-gateway and
// protoc-gen-openapiv2 (the grpc-gateway/v2 version in go.mod). Generated
// files carry "DO NOT EDIT" (the OpenAPI JSON cannot) and are committed.
package api
