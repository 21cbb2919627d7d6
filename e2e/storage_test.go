package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
)

// storageCluster is a real etcd (embedded in the test process) and N
// `magnetar bookie` processes on fixed loopback ports.
type storageCluster struct {
	t       *testing.T
	md      metadata.Store
	etcdURL string
	etcd    []*Process // the metadata store's members, when the test runs them
	bookies []*Process
	addrs   []string
}

func newStorageCluster(t *testing.T, n int) *storageCluster {
	if testing.Short() {
		t.Skip("process-level test")
	}
	ctx := context.Background()
	emb, err := etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{Dir: filepath.Join(t.TempDir(), "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emb.Close() })
	c := &storageCluster{t: t, md: emb, etcdURL: emb.ClientURLs()[0]}
	for i := 0; i < n; i++ {
		c.addBookie()
	}
	c.waitRegistered(n)
	return c
}

// newStorageClusterOnEtcdCluster is newStorageCluster over a real etcd
// cluster of three `magnetar metadata` processes; etcdURL lists all three.
func newStorageClusterOnEtcdCluster(t *testing.T, n int) *storageCluster {
	if testing.Short() {
		t.Skip("process-level test")
	}
	clientAddrs := []string{FreeAddr(t), FreeAddr(t), FreeAddr(t)}
	peers := make([]string, 3)
	peerAddrs := []string{FreeAddr(t), FreeAddr(t), FreeAddr(t)}
	for i := range peers {
		peers[i] = fmt.Sprintf("m%d=http://%s", i, peerAddrs[i])
	}
	urls := make([]string, 3)
	var members []*Process
	for i := range 3 {
		urls[i] = "http://" + clientAddrs[i]
		members = append(members, Start(t, fmt.Sprintf("metadata-%d", i), "metadata", "--name", fmt.Sprintf("m%d", i),
			"--data-dir", filepath.Join(t.TempDir(), "etcd"), "--listen-client-url", urls[i],
			"--listen-peer-url", "http://"+peerAddrs[i], "--initial-cluster", strings.Join(peers, ",")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	md, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: urls})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { md.Close() })
	waitFor(t, "the etcd cluster to elect a leader", 60*time.Second, func() bool {
		_, err := md.Revision(ctx)
		return err == nil
	})
	c := &storageCluster{t: t, md: md, etcdURL: strings.Join(urls, ","), etcd: members}
	for i := 0; i < n; i++ {
		c.addBookie()
	}
	c.waitRegistered(n)
	return c
}

func (c *storageCluster) addBookie() {
	addr := FreeAddr(c.t)
	p := Start(c.t, fmt.Sprintf("bookie-%d", len(c.bookies)), "bookie",
		"--data-dir", filepath.Join(c.t.TempDir(), "bookie"),
		"--listen", addr, "--metadata", c.etcdURL, "--session-ttl", "2s")
	p.WaitListening(addr, 30*time.Second)
	c.bookies = append(c.bookies, p)
	c.addrs = append(c.addrs, addr)
}

func (c *storageCluster) waitRegistered(n int) {
	c.t.Helper()
	waitFor(c.t, fmt.Sprintf("%d registered bookies", n), 30*time.Second, func() bool {
		regs, err := bookie.ListAvailable(context.Background(), c.md)
		return err == nil && len(regs) == n
	})
}

func (c *storageCluster) index(addr string) int { return slices.Index(c.addrs, addr) }

func (c *storageCluster) newClient() *client.Client {
	pool := wire.NewPool(wire.ClientConfig{DialTimeout: time.Second, RequestTimeout: 5 * time.Second})
	c.t.Cleanup(pool.Close)
	cl, err := client.New(client.Config{Metadata: c.md, Dialer: client.PoolDialer{Pool: pool}, AddTimeout: 5 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func entryPayload(i int64) []byte { return []byte(fmt.Sprintf("payload-%08d", i)) }

// writer appends continuously with a bounded pipeline and records which
// entries were acknowledged.
type writer struct {
	h       *client.WriteHandle
	mu      sync.Mutex
	acked   []int64
	lastErr error
	stop    chan struct{}
	done    chan struct{}
}

func startWriter(h *client.WriteHandle) *writer {
	w := &writer{h: h, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sem := make(chan struct{}, 128)
		var wg sync.WaitGroup
		for i := int64(0); ; i++ {
			select {
			case <-w.stop:
				wg.Wait()
				return
			case sem <- struct{}{}:
			}
			wg.Add(1)
			want := i
			h.AppendAsync(entryPayload(i), func(id int64, err error) {
				defer wg.Done()
				defer func() { <-sem }()
				w.mu.Lock()
				defer w.mu.Unlock()
				if err != nil {
					w.lastErr = err
					return
				}
				if id != want {
					w.lastErr = fmt.Errorf("entry %d acknowledged as id %d", want, id)
				}
				w.acked = append(w.acked, id)
			})
			w.mu.Lock()
			failed := w.lastErr != nil
			w.mu.Unlock()
			if failed {
				wg.Wait()
				return
			}
		}
	}()
	return w
}

func (w *writer) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writer) halt() ([]int64, error) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked), w.lastErr
}

// verifyLedger recovers the ledger with a fresh client and checks that every
// acknowledged entry is there, in order, with its payload.
func verifyLedger(t *testing.T, cl *client.Client, id int64, acked []int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := cl.OpenLedger(ctx, id, true)
	if err != nil {
		t.Fatalf("recover ledger %d: %v", id, err)
	}
	last := r.LastAddConfirmed()
	maxAcked := int64(-1)
	for i, a := range acked {
		if a != int64(i) {
			t.Fatalf("acknowledgements out of order at %d: %d", i, a)
		}
		maxAcked = a
	}
	if last < maxAcked {
		t.Fatalf("ledger %d recovered up to entry %d, but entry %d was acknowledged", id, last, maxAcked)
	}
	for from := int64(0); from <= last; from += 500 {
		to := min(from+499, last)
		ents, err := r.Read(ctx, from, to)
		if err != nil {
			t.Fatalf("read %d..%d: %v", from, to, err)
		}
		for _, e := range ents {
			if string(e.Payload) != string(entryPayload(e.EntryID)) {
				t.Fatalf("entry %d holds %q", e.EntryID, e.Payload)
			}
		}
	}
	return last
}

// TestBookieKill9DuringWrites: E=3, Qw=3, Qa=2 on three bookie processes. One
// bookie is SIGKILLed during writes (the writer goes on with two), then the
// other two are SIGKILLed as well, so the writer dies mid-stream. After all
// three restart, recovery finds every acknowledged entry.
func TestBookieKill9DuringWrites(t *testing.T) {
	c := newStorageCluster(t, 3)
	cl := c.newClient()
	ctx := context.Background()
	h, err := cl.CreateLedger(ctx, client.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := startWriter(h)
	waitFor(t, "1000 acknowledged entries", 60*time.Second, func() bool { return w.ackedCount() >= 1000 })
	victim := c.index(h.Metadata().Fragments[0].Bookies[1])
	c.bookies[victim].Kill()
	before := w.ackedCount()
	waitFor(t, "writes to continue on two bookies", 60*time.Second, func() bool { return w.ackedCount() >= before+2000 })
	for i, p := range c.bookies {
		if i != victim {
			p.Kill()
		}
	}
	acked, werr := w.halt()
	t.Logf("acknowledged %d entries before the last bookies died (writer error: %v)", len(acked), werr)

	for _, p := range c.bookies {
		p.Restart()
	}
	for i, p := range c.bookies {
		p.WaitListening(c.addrs[i], 30*time.Second)
	}
	last := verifyLedger(t, c.newClient(), h.ID(), acked)
	t.Logf("recovered ledger %d up to entry %d", h.ID(), last)
}

// TestTwoWritersOldOneFenced: a second client recovers a ledger whose writer
// is alive; the first writer is fenced and cannot add again.
func TestTwoWritersOldOneFenced(t *testing.T) {
	c := newStorageCluster(t, 3)
	ctx := context.Background()
	old := c.newClient()
	h, err := old.CreateLedger(ctx, client.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := startWriter(h)
	waitFor(t, "500 acknowledged entries", 60*time.Second, func() bool { return w.ackedCount() >= 500 })

	newer := c.newClient()
	r, err := newer.OpenLedger(ctx, h.ID(), true)
	if err != nil {
		t.Fatal(err)
	}
	acked, werr := w.halt()
	if !errors.Is(werr, client.ErrFenced) {
		t.Fatalf("old writer's error after fencing: %v, want ErrFenced", werr)
	}
	if _, err := h.Append(ctx, []byte("after fence")); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("old writer append after fencing: %v", err)
	}
	if r.LastAddConfirmed() < acked[len(acked)-1] {
		t.Fatalf("recovered up to %d, old writer had %d acknowledged", r.LastAddConfirmed(), acked[len(acked)-1])
	}
	verifyLedger(t, newer, h.ID(), acked)
}

// TestRecoveryWithOneBookieDown: the writer dies (its process would be gone:
// it never closes) and one bookie of the ensemble is SIGKILLed; recovery
// with the two others closes the ledger with every acknowledged entry.
func TestRecoveryWithOneBookieDown(t *testing.T) {
	c := newStorageCluster(t, 3)
	ctx := context.Background()
	cl := c.newClient()
	h, err := cl.CreateLedger(ctx, client.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := startWriter(h)
	waitFor(t, "800 acknowledged entries", 60*time.Second, func() bool { return w.ackedCount() >= 800 })
	c.bookies[c.index(h.Metadata().Fragments[0].Bookies[0])].Kill()
	// The writer is abandoned here, as if its broker died.
	acked, _ := w.halt()
	verifyLedger(t, c.newClient(), h.ID(), acked)
}

// TestReReplicationAfterRemovingBookie: four bookies, ledgers on three; one
// bookie of the ensemble is killed for good. The auditor copies its
// replicas to the fourth and every ledger again has its write quorum.
func TestReReplicationAfterRemovingBookie(t *testing.T) {
	c := newStorageCluster(t, 4)
	ctx := context.Background()
	cl := c.newClient()
	var ids []int64
	for l := 0; l < 3; l++ {
		h, err := cl.CreateLedger(ctx, client.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		for i := int64(0); i < 300; i++ {
			if _, err := h.Append(ctx, entryPayload(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ID())
	}
	m, _ := cl.LedgerMetadata(ctx, ids[0])
	victimAddr := m.Fragments[0].Bookies[0]
	c.bookies[c.index(victimAddr)].Kill()
	c.waitRegistered(3) // its registration expires with its session

	aud, err := cl.NewAuditor(client.AuditorConfig{ID: "auditor-1", Interval: time.Second, SessionTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); aud.Run(actx) }()
	defer func() { cancel(); <-done }()

	pool := wire.NewPool(wire.ClientConfig{})
	defer pool.Close()
	for _, id := range ids {
		waitFor(t, fmt.Sprintf("ledger %d re-replicated", id), 60*time.Second, func() bool {
			m, err := cl.LedgerMetadata(ctx, id)
			return err == nil && !slices.Contains(m.Fragments[0].Bookies, victimAddr)
		})
		m, _ := cl.LedgerMetadata(ctx, id)
		// Every bookie of the fragment holds every entry (Qw = E = 3).
		for _, addr := range m.Fragments[0].Bookies {
			conn, err := pool.Get(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			for e := int64(0); e <= m.LastEntry; e++ {
				ent, err := conn.Read(ctx, id, e, 0)
				if err != nil || string(ent.Payload) != string(entryPayload(e)) {
					t.Fatalf("ledger %d entry %d on %s after re-replication: %v", id, e, addr, err)
				}
			}
		}
	}
}

// TestBookieDecommission drains a stopped bookie with `magnetar bookie
// decommission`: afterwards no closed ledger names it, every entry is still
// readable with full replication, and its cookie is gone.
func TestBookieDecommission(t *testing.T) {
	c := newStorageCluster(t, 4)
	ctx := context.Background()
	cl := c.newClient()
	var ids []int64
	for l := 0; l < 3; l++ {
		h, err := cl.CreateLedger(ctx, client.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		for i := int64(0); i < 200; i++ {
			if _, err := h.Append(ctx, entryPayload(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ID())
	}
	m, _ := cl.LedgerMetadata(ctx, ids[0])
	victim := m.Fragments[0].Bookies[1]

	// Refused while the bookie runs.
	running := Start(t, "decommission-running", "bookie", "decommission", "--metadata", c.etcdURL, "--id", victim, "--timeout", "30s")
	if err := running.Wait(60 * time.Second); err == nil {
		t.Fatalf("decommission of a running bookie succeeded:\n%s", running.Output())
	}

	c.bookies[c.index(victim)].Terminate()
	c.waitRegistered(3)
	dec := Start(t, "decommission", "bookie", "decommission", "--metadata", c.etcdURL, "--id", victim, "--timeout", "2m")
	if err := dec.Wait(150 * time.Second); err != nil {
		t.Fatalf("decommission: %v\n%s", err, dec.Output())
	}
	t.Logf("%s", strings.TrimSpace(dec.Output()))
	for _, id := range ids {
		m, err := cl.LedgerMetadata(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Fragments {
			if slices.Contains(f.Bookies, victim) {
				t.Fatalf("ledger %d still names %s: %+v", id, victim, m.Fragments)
			}
		}
	}
	verifyLedger(t, cl, ids[0], seqUpTo(199))
	if _, err := c.md.Get(ctx, bookie.CookieKey(victim)); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("cookie of the decommissioned bookie: %v", err)
	}
}

func seqUpTo(n int64) []int64 {
	out := make([]int64, n+1)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}
