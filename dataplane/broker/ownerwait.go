package broker

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// A broker killed with its bundles keeps them until its metadata session
// expires (up to SessionTTL plus the store's expiry check after its last
// keepalive). Clients that lose their connection to it reconnect with a
// doubling backoff (Pulsar clients: 0.1 s, 0.2 s, ... 6.4 s), so a lookup
// answered with the dead owner in that window makes the client come back
// only after its next, longer delay: the failover time would be set by
// where the expiry falls in the client's backoff (4 s or 14 s after a kill
// with a 3 s TTL). Instead a lookup of a bundle whose owner refuses
// connections is held until the ownership key vanishes, then answered with
// the new owner, so clients reconnect as soon as the bundle can be taken.
const (
	// ownerProbeTimeout bounds the connection attempt to an owner.
	ownerProbeTimeout = 300 * time.Millisecond
	// releaseSlack is how much longer than SessionTTL a held lookup waits
	// for the key to vanish (the store's expiry check runs every 500 ms).
	releaseSlack = 2 * time.Second
)

// releaseWait is one wait for an ownership key to vanish.
type releaseWait struct {
	done     chan struct{}
	released bool // valid once done is closed
}

// ownerGone reports whether the owner's broker address refuses
// connections: its process is gone (a paused or partitioned broker does
// not refuse, it times out, and is not waited for).
func (o *ownership) ownerGone(ctx context.Context, oi OwnerInfo) bool {
	d := net.Dialer{Timeout: ownerProbeTimeout}
	c, err := d.DialContext(ctx, "tcp", oi.BrokerID)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// awaitRelease waits until the ownership key is gone (true) or until
// SessionTTL+releaseSlack passed or ctx ended (false). Concurrent lookups
// of the same bundle share one watch.
func (o *ownership) awaitRelease(ctx context.Context, key string, oi OwnerInfo) bool {
	o.mu.Lock()
	w, ok := o.releases[key]
	if !ok {
		w = &releaseWait{done: make(chan struct{})}
		o.releases[key] = w
		o.s.wg.Add(1)
		go func() {
			defer o.s.wg.Done()
			start := time.Now()
			o.s.log.Info("bundle owner refuses connections: waiting for its session to expire", "key", key, "owner", oi.BrokerID)
			w.released = o.watchRelease(key)
			o.s.log.Info("bundle owner wait ended", "key", key, "owner", oi.BrokerID, "released", w.released,
				"waitedMs", time.Since(start).Milliseconds())
			o.mu.Lock()
			delete(o.releases, key)
			o.mu.Unlock()
			close(w.done)
		}()
	}
	o.mu.Unlock()
	select {
	case <-w.done:
		return w.released
	case <-ctx.Done():
		return false
	}
}

// watchRelease watches key until it is deleted (true), or for at most
// SessionTTL+releaseSlack or until the broker stops (false).
func (o *ownership) watchRelease(key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), o.ttl+releaseSlack)
	defer cancel()
	go func() {
		select {
		case <-o.s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		rev, err := o.md.Revision(ctx)
		if err == nil {
			if _, err = o.md.Get(ctx, key); errors.Is(err, metadata.ErrNotFound) {
				return true
			}
		}
		var wt metadata.Watcher
		if err == nil {
			wt, err = o.md.Watch(ctx, key, rev+1)
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for ev := range wt.Events() {
			if ev.Key == key && ev.Type == metadata.EventDelete {
				wt.Close()
				return true
			}
		}
		wt.Close()
	}
	return false
}
