// Package provisionertest is the conformance suite every
// provisioner.Provisioner implementation must pass. Tests of an
// implementation call Run with a constructor.
//
// It also holds Standalones, a provisioner of in-process standalones for
// tests of what runs on a data plane (the region agent's, the CLI's).
//
// Concurrency: Run drives one provisioner from the test goroutine.
// Standalones is safe for concurrent use (the agent calls it from its
// goroutines); its standalones are shut down when the test ends.
package provisionertest
