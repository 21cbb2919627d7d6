// Package metadatatest is the conformance suite every metadata.Store backend
// must pass. A backend's tests call Run with a Harness that makes fresh,
// isolated stores and, where the backend can, forces session expiry,
// compacts history and restarts its server:
//
//	func TestConformance(t *testing.T) {
//		metadatatest.Run(t, metadatatest.Harness{New: newStore, ExpireSession: expire})
//	}
//
// The suite covers reads, writes and compare-and-set; create-if-absent;
// versioned deletes; Children; ordered, resumable and compacted watches and
// watches across a server restart; ephemeral keys on session close and
// expiry; leader election; and NextID and CAS under concurrent goroutines.
// Tests that need an optional Harness hook skip without it.
//
// Every wait is bounded by Harness.Timeout; nothing asserts wall-clock
// durations. The few checks that something does not happen (a second
// candidate is not elected while the first leads) wait briefly and are
// backed by later checks that would catch a wrong outcome.
package metadatatest
