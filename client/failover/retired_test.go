package failover

import (
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestSweepRetiredHoldsUnusedClients: a switch retires the old cluster's
// client; sweepRetired keeps it while it has been unused for less than
// retiredHold and closes it after, and a client a handle still uses stays.
// (pulsar.NewClient connects on first use: no cluster needs to run.)
func TestSweepRetiredHoldsUnusedClients(t *testing.T) {
	if got, want := reconnectBound(pulsar.ClientOptions{}), 71*time.Second; got != want {
		t.Fatalf("reconnectBound with the client's defaults = %v, want %v", got, want)
	}
	c, err := newClient(pulsar.ClientOptions{}, Cluster{ServiceURL: "pulsar://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.retiredHold = 200 * time.Millisecond
	if err := c.switchTo(Cluster{ServiceURL: "pulsar://127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	retired := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.retired)
	}
	c.sweepRetired() // notes when it became unused
	c.sweepRetired()
	if retired() != 1 {
		t.Fatalf("an unused client was closed before retiredHold")
	}
	time.Sleep(c.retiredHold)
	c.sweepRetired()
	if n := retired(); n != 0 {
		t.Fatalf("%d retired clients left after retiredHold unused", n)
	}

	// A retired client that a producer still uses is kept however long.
	old := c.cur
	p := &Producer{c: c, on: old, at: old}
	c.mu.Lock()
	c.producers[p] = struct{}{}
	c.mu.Unlock()
	if err := c.switchTo(Cluster{ServiceURL: "pulsar://127.0.0.1:3"}); err != nil {
		t.Log(err) // the producer cannot be created where nothing listens
	}
	c.sweepRetired()
	time.Sleep(c.retiredHold)
	c.sweepRetired()
	if retired() != 1 {
		t.Fatal("a retired client still in use was closed")
	}
}
