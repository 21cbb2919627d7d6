// Package freeport picks loopback TCP ports for servers whose address must
// be known before they start (an etcd member advertises its URLs, a child
// process gets its port on the command line).
//
// Binding port 0 and closing the socket hands out a port from the kernel's
// ephemeral range, the same range outgoing connections take their source
// ports from: in a busy test run another socket can take the port before
// the server binds it. Ports here come from just below that range, where
// only explicit binds land, and are never handed out twice by one process.
// A bind can still lose to another process; callers that can retry (the
// embedded etcd does) should.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// attempts bounds how many random ports Port tries before giving up.
const attempts = 200

var (
	mu     sync.Mutex
	issued = map[int]bool{}
	lo, hi = span()
)

// span returns the range ports are picked from: the half-range below the
// kernel's ephemeral ports (Linux default 32768-60999, so 16384-32767).
func span() (int, int) {
	first := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n >= 4096 {
				first = n
			}
		}
	}
	return first / 2, first - 1
}

// Port returns a port on 127.0.0.1 that was free a moment ago and that this
// process has not returned before.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range attempts {
		p := lo + rand.IntN(hi-lo+1)
		if issued[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		issued[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d after %d tries", lo, hi, attempts)
}

// Addr returns "127.0.0.1:port" for a port from Port.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// Addrs returns n addresses from Addr, all different.
func Addrs(n int) ([]string, error) {
	out := make([]string, 0, n)
	for range n {
		a, err := Addr()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
