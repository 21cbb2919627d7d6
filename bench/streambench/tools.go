//go:build tools

package main

// nats-server is built by the harness with `go build` from its module; this
// import keeps the module and its sums in go.mod.
import _ "github.com/nats-io/nats-server/v2"
