package ledger

import (
	"context"
	"sync"
	"time"
)

// readPacer spreads catch-up reads of a backlog (from the bookies, and
// from memory when far behind the newest entry: catchupLag) at a rate in
// bytes per second, shared by every managed ledger of a factory. A Read is
// charged, once it returns, for the entries it returns (their size is not
// known before); the next read waits until the budget has paid for it. Up
// to paceBurst of unspent budget accumulates while idle.
type readPacer struct {
	rate float64 // bytes per second; <= 0: no pacing

	mu   sync.Mutex
	next time.Time // when the budget is back to zero
}

// paceBurst is how far ahead of the rate reads may run after a pause.
const paceBurst = 100 * time.Millisecond

func (p *readPacer) enabled() bool { return p != nil && p.rate > 0 }

// paceSlice is the most budget one paced Read takes: a Read returns at
// most this much of the rate (and at least one entry), so that a catch-up
// is delivered in small steps. In one step per paceBurst, the consumer's
// client got megabytes at once and the producers of the same machine
// waited behind it (W6 with --backlog-read-rate: p99 during catch-up
// 20-34 ms against 3.5-13.7 ms alone).
const paceSlice = 5 * time.Millisecond

// capBytes lowers a Read's byte limit (<= 0: none) to paceSlice's worth.
func (p *readPacer) capBytes(maxBytes int) int {
	if !p.enabled() {
		return maxBytes
	}
	c := max(1, int(p.rate*paceSlice.Seconds()))
	if maxBytes <= 0 || maxBytes > c {
		return c
	}
	return maxBytes
}

// wait blocks until a read may start.
func (p *readPacer) wait(ctx context.Context) error {
	if !p.enabled() {
		return nil
	}
	p.mu.Lock()
	d := time.Until(p.next)
	p.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// charge records a read of n bytes.
func (p *readPacer) charge(n int) {
	if !p.enabled() || n <= 0 {
		return
	}
	now := time.Now()
	p.mu.Lock()
	if floor := now.Add(-paceBurst); p.next.Before(floor) {
		p.next = floor
	}
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	p.mu.Unlock()
}
