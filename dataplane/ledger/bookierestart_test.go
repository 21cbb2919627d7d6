package ledger

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// TestWritesResumeAfterBookieRestart: three bookies, ensemble 3, write
// quorum 2, ack quorum 2, so no bookie outside the ensemble can replace
// one that stops. While one is down the adds of its write sets cannot
// reach their quorum; once it is back at the same address (same disk),
// writing resumes within the bound below, not after the ledger client's
// add timeout (30 s by default, the value used here). Every acknowledged
// entry is then read back once, in order.
func TestWritesResumeAfterBookieRestart(t *testing.T) {
	const resumeBound = 2 * time.Second
	c := newCluster(t, clusterOpts{bookies: 3})
	pool := wire.NewPool(wire.ClientConfig{DialTimeout: time.Second, RequestTimeout: 5 * time.Second})
	t.Cleanup(pool.Close)
	cl, err := client.New(client.Config{Metadata: c.md, Dialer: client.PoolDialer{Pool: pool}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFactory(FactoryConfig{Client: cl, Metadata: c.md, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	ml := openML(t, f, "restart", &Config{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2,
		RetentionTime: -1, RetentionSize: -1}) // keeps every ledger for the read-back
	addN(t, ml, 0, 10)

	// One writer, one add at a time, recording when each is acknowledged.
	var mu sync.Mutex
	var acks []time.Time
	var failed error
	stop := make(chan struct{})
	done := make(chan struct{})
	next := 10
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := ml.AddEntrySync(ctx, payload(next))

			cancel()
			mu.Lock()
			if err != nil {
				failed = err
				mu.Unlock()
				return
			}
			next++
			acks = append(acks, time.Now())
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	acked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acks)
	}
	waitUntil(t, "adds before the fault", func() bool { return acked() >= 20 })

	c.stopBookie(1)
	// With the bookie gone, two of the three write sets lack their quorum:
	// the writer soon waits on an add that cannot be acknowledged.
	time.Sleep(300 * time.Millisecond)
	before := acked()
	time.Sleep(1700 * time.Millisecond)
	if n := acked(); n != before {
		t.Fatalf("%d adds acknowledged while a bookie of every ledger's ensemble was down", n-before)
	}
	c.startBookie(1)
	restarted := time.Now()

	// Waits past the add timeout, so that a writer that only resumes
	// then shows as a measured stall rather than a timeout.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		if failed != nil || len(acks) > before || time.Now().After(deadline) {
			break
		}
		mu.Unlock()
	}
	if failed != nil || len(acks) == before {
		mu.Unlock()
		t.Fatalf("no add acknowledged after the restart (add error %v)", failed)
	}
	stall := acks[before].Sub(restarted)
	mu.Unlock()
	t.Logf("first acknowledgement %v after the bookie restarted", stall.Round(time.Millisecond))
	if stall > resumeBound {
		t.Errorf("writes resumed %v after the bookie restarted, want at most %v", stall, resumeBound)
	}
	waitUntil(t, "more adds after the restart", func() bool { return acked() >= before+20 })
	close(stop)
	<-done

	mu.Lock()
	n := next
	mu.Unlock()
	checkEntries(t, readAll(t, ml), 0, n, nil)
}
