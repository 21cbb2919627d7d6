// Package e2e holds process-level tests: they build the magnetar binary, run
// real bookie (and later broker) processes on loopback ports against a real
// etcd, and kill, pause and restart them with signals. The harness in
// harness.go is shared by every scenario. Tests are skipped with -short.
package e2e
