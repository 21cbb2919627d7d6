package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsDistinctBindableOutsideEphemeral: ports are never repeated,
// lie below the kernel's ephemeral range and can be bound.
func TestPortsDistinctBindableOutsideEphemeral(t *testing.T) {
	seen := map[int]bool{}
	for range 100 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < lo || p > hi {
			t.Fatalf("port %d outside %d-%d", p, lo, hi)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
	}
}

// TestPortSkipsTakenPorts: a port some socket holds is not handed out.
func TestPortSkipsTakenPorts(t *testing.T) {
	held := map[int]bool{}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	// Hold a slice of the range, then ask for many ports: none may be held.
	for p := lo; p < lo+500 && p <= hi; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		held[p] = true
	}
	for range 200 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if held[p] {
			t.Fatalf("port %d handed out while a listener holds it", p)
		}
	}
}

func TestAddr(t *testing.T) {
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || host != "127.0.0.1" || port == "" {
		t.Fatalf("Addr() = %q, %v", a, err)
	}
}

func TestAddrs(t *testing.T) {
	as, err := Addrs(9)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range as {
		if seen[a] {
			t.Fatalf("Addrs returned %s twice: %v", a, as)
		}
		seen[a] = true
	}
	if len(as) != 9 {
		t.Fatalf("Addrs(9) returned %d", len(as))
	}
}
