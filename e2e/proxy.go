package e2e

import (
	"testing"

	"github.com/magnetar-dev/magnetar/internal/tcpproxy"
)

// Proxy is a TCP proxy placed between two components so a test can cut or
// slow the link (package tcpproxy).
type Proxy = tcpproxy.Proxy

// StartProxy listens on a free loopback port, forwards to target, and stops
// when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
