// Package provisionertest is the conformance suite every
// provisioner.Provisioner implementation must pass. Tests of an
// implementation call Run with a constructor.
//
// Concurrency: Run drives one provisioner from the test goroutine.
package provisionertest
