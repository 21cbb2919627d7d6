package broker

import (
	"testing"
	"time"
)

// TestByteBudgetBlocksUntilRelease: the pending-publish budget holds a
// publisher (its connection's reads) while full and lets it go on release;
// a single message larger than the budget still passes when nothing is
// held, and a closed connection stops waiting.
func TestByteBudgetBlocksUntilRelease(t *testing.T) {
	b := newByteBudget(100)
	if !b.acquire(60, nil) {
		t.Fatal("first acquire refused")
	}
	got := make(chan bool, 1)
	go func() { got <- b.acquire(60, nil) }()
	select {
	case <-got:
		t.Fatal("acquire over the budget did not block")
	case <-time.After(50 * time.Millisecond):
	}
	b.release(60)
	if !<-got {
		t.Fatal("blocked acquire failed after release")
	}
	b.release(60)

	if !b.acquire(500, nil) {
		t.Fatal("an oversized acquire on an empty budget must pass")
	}
	stop := make(chan struct{})
	go func() { got <- b.acquire(10, stop) }()
	close(stop)
	b.wakeAll()
	if <-got {
		t.Fatal("acquire succeeded after its connection closed")
	}
	b.release(500)
}
