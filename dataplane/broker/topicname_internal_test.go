package broker

import (
	"testing"
	"unsafe"
)

// TestNameIn: a topic's name taken from its registry key (ledgerName) is
// the same name, and its parts are pieces of the key, not copies.
func TestNameIn(t *testing.T) {
	for _, s := range []string{
		"persistent://tn/ns/plain",
		"non-persistent://tn/ns/np",
		"persistent://tn/ns/with/slash-partition-3",
	} {
		n, err := ParseTopicName(s)
		if err != nil {
			t.Fatal(err)
		}
		key := n.ledgerName()
		got := n.nameIn(key)
		if got != n || got.String() != s {
			t.Fatalf("nameIn(%q) = %+v, want %+v", key, got, n)
		}
		start := uintptr(unsafe.Pointer(unsafe.StringData(key)))
		end := start + uintptr(len(key))
		for _, part := range []string{got.Tenant, got.Namespace, got.Local} {
			if p := uintptr(unsafe.Pointer(unsafe.StringData(part))); p < start || p >= end {
				t.Fatalf("%q of %q is a copy, not a piece of the key", part, s)
			}
		}
	}
}
