// Package storagetest is the conformance suite for storage.Storage
// implementations. Every implementation (the on-disk DiskStorage, the
// in-memory one) runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.Storage { ... })
//	}
//
// open must return a fresh, empty, writable storage for each subtest; Run
// closes it. The suite starts goroutines only inside subtests and waits for
// them.
package storagetest
