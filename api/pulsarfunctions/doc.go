// Package pulsarfunctions holds the Go types of Apache Pulsar Functions'
// worker-to-instance protocol, generated from function.proto and
// instance.proto: FunctionDetails and its specs (handed to an instance as
// proto3 JSON on its command line), the worker's metadata records, and the
// InstanceControl gRPC service every instance serves (status, metrics,
// health check).
//
// The proto package is "proto", as in Pulsar, because gRPC names the
// service /proto.InstanceControl/... on the wire; the file paths are ours.
// Do not edit the .pb.go files: change the .proto and run `make generate`.
// The Python instance's modules (dataplane/functions/pyinstance) are
// generated from the same files by the same script.
package pulsarfunctions

//go:generate ../generate.sh
