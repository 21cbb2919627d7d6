package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestBrokerShutdownWithoutMetadata: a broker whose metadata store is gone
// (every etcd member SIGKILLed) still exits on SIGTERM within its shutdown
// bound, saying what it gave up on.
func TestBrokerShutdownWithoutMetadata(t *testing.T) {
	c := newDataCluster(t, 3, 1)
	cl := newClusterClient(t, c.serviceURL())
	sp := busyTopic(t, cl, "persistent://public/default/shutdown-no-md", 100)
	sp.halt()
	cl.Close()
	for _, m := range c.etcd {
		m.Kill()
	}
	b := c.brokers[0]
	start := time.Now()
	b.Terminate()
	took := time.Since(start)
	t.Logf("broker exited %v after SIGTERM with its metadata store gone; its last lines:\n%s", took.Round(time.Millisecond), tail(b.Output(), 15))
	// --shutdown-timeout 8s: Shutdown gives up on the step in progress
	// then.
	if took > 15*time.Second {
		t.Errorf("broker took %v to exit after SIGTERM", took)
	}
	if out := b.Output(); !strings.Contains(out, "shutdown") {
		t.Errorf("the broker did not say what it gave up on:\n%s", tail(out, 5))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
