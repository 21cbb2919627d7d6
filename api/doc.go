// Package api owns Magnetar's wire and API definitions: the .proto sources
// and the Go code generated from them. Nothing here is written by hand except
// the .proto files, the package docs and generate.sh.
//
//   - pulsarwire: the Apache Pulsar binary protocol messages (the broker's
//     client-facing port), written from the protocol's published field
//     numbers and types.
//
// `make generate` (go generate ./...) runs generate.sh, which regenerates
// every *.pb.go under api/ with protoc and a protoc-gen-go pinned to the
// google.golang.org/protobuf version in go.mod. Generated files carry
// "DO NOT EDIT" and are committed.
package api
