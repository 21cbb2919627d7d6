package metadatatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Harness adapts one backend to the suite.
type Harness struct {
	// New returns a fresh store, isolated from every other store New
	// returned (its own server, or its own key prefix on a shared one). New
	// must close the store when t ends (t.Cleanup); the suite may close it
	// earlier, so Close must be idempotent.
	New func(t *testing.T) metadata.Store
	// ExpireSession makes sess, a session of s, lost as if its lease expired
	// (not through sess.Close). Optional: tests that need it are skipped.
	ExpireSession func(t *testing.T, s metadata.Store, sess metadata.Session)
	// Compact discards the change history of s below rev, so a watch from
	// an older revision fails with metadata.ErrCompacted. Optional.
	Compact func(t *testing.T, s metadata.Store, rev int64)
	// Restart stops the server behind s and starts it again with its data;
	// s must reconnect by itself. Optional.
	Restart func(t *testing.T, s metadata.Store)
	// SessionTTL is the TTL of the suite's sessions. Default 10s: the suite
	// never waits for a TTL to run out (it uses ExpireSession), and a long
	// TTL keeps sessions alive on a machine too loaded to renew them on time.
	SessionTTL time.Duration
	// Timeout bounds every wait of the suite. Default 20s.
	Timeout time.Duration
}

func (h Harness) ttl() time.Duration {
	if h.SessionTTL > 0 {
		return h.SessionTTL
	}
	return 10 * time.Second
}

func (h Harness) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return 20 * time.Second
}

// Run runs the conformance suite against the backend h adapts. Each test
// gets a fresh store from h.New.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("metadatatest: Harness.New is nil")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"InvalidKeys", testInvalidKeys},
		{"GetPutCAS", testGetPutCAS},
		{"CreateIfAbsent", testCreateIfAbsent},
		{"CreateUnless", testCreateUnless},
		{"VersionsNeverRepeat", testVersionsNeverRepeat},
		{"Delete", testDelete},
		{"Children", testChildren},
		{"ChildrenMany", testChildrenMany},
		{"Revision", testRevision},
		{"WatchOrder", testWatchOrder},
		{"WatchResume", testWatchResume},
		{"WatchRoot", testWatchRoot},
		{"WatchEnd", testWatchEnd},
		{"WatchCompacted", testWatchCompacted},
		{"WatchAcrossRestart", testWatchAcrossRestart},
		{"EphemeralOnClose", testEphemeralOnClose},
		{"EphemeralOnExpiry", testEphemeralOnExpiry},
		{"EphemeralOwnership", testEphemeralOwnership},
		{"Election", testElection},
		{"ElectionSessionExpiry", testElectionSessionExpiry},
		{"ElectionCancel", testElectionCancel},
		{"NextIDConcurrent", testNextIDConcurrent},
		{"ConcurrentCAS", testConcurrentCAS},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
			defer cancel()
			e := &env{h: h, ctx: ctx, s: h.New(t)}
			tc.fn(t, e)
		})
	}
}

// env is the state of one test.
type env struct {
	h   Harness
	ctx context.Context
	s   metadata.Store
}

func (e *env) session(t *testing.T) metadata.Session {
	t.Helper()
	sess, err := e.s.NewSession(e.ctx, e.h.ttl())
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

func (e *env) put(t *testing.T, key, value string) metadata.Version {
	t.Helper()
	v, err := e.s.Put(e.ctx, key, []byte(value), metadata.AnyVersion)
	if err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
	return v
}

func (e *env) mustAbsent(t *testing.T, key string) {
	t.Helper()
	if kv, err := e.s.Get(e.ctx, key); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("Get(%s) = %+v, %v; want ErrNotFound", key, kv, err)
	}
}

func (e *env) watch(t *testing.T, prefix string, from int64) metadata.Watcher {
	t.Helper()
	w, err := e.s.Watch(e.ctx, prefix, from)
	if err != nil {
		t.Fatalf("Watch(%s, %d): %v", prefix, from, err)
	}
	t.Cleanup(w.Close)
	return w
}

// recv reads n events from w.
func (e *env) recv(t *testing.T, w metadata.Watcher, n int) []metadata.Event {
	t.Helper()
	var evs []metadata.Event
	for len(evs) < n {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended after %d of %d events: %v", len(evs), n, w.Err())
			}
			evs = append(evs, ev)
		case <-e.ctx.Done():
			t.Fatalf("timed out after %d of %d events: %+v", len(evs), n, evs)
		}
	}
	return evs
}

// waitClosed waits for ch to close.
func (e *env) waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-e.ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
	}
}

// eventually polls cond until it returns nil.
func (e *env) eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
	}
}

type ev struct {
	typ   metadata.EventType
	key   string
	value string
}

func (x ev) String() string { return fmt.Sprintf("%v %s=%q", x.typ, x.key, x.value) }

// checkEvents compares events with want and checks that revisions increase.
func checkEvents(t *testing.T, got []metadata.Event, want []ev) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %d %v", len(got), got, len(want), want)
	}
	for i, g := range got {
		w := want[i]
		if g.Type != w.typ || g.Key != w.key || string(g.Value) != w.value {
			t.Errorf("event %d = %v %s=%q (rev %d), want %v", i, g.Type, g.Key, g.Value, g.Revision, w)
		}
		if g.Type == metadata.EventDelete && g.Value != nil {
			t.Errorf("event %d: delete carries value %q", i, g.Value)
		}
		if i > 0 && g.Revision <= got[i-1].Revision {
			t.Errorf("event %d revision %d after %d", i, g.Revision, got[i-1].Revision)
		}
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func testInvalidKeys(t *testing.T, e *env) {
	for _, k := range []string{"", "a", "a/b", "/a/", "//a", "/a//b", "/"} {
		_, err := e.s.Get(e.ctx, k)
		wantErr(t, fmt.Sprintf("Get(%q)", k), err, metadata.ErrInvalidKey)
		_, err = e.s.Put(e.ctx, k, nil, metadata.AnyVersion)
		wantErr(t, fmt.Sprintf("Put(%q)", k), err, metadata.ErrInvalidKey)
		err = e.s.Delete(e.ctx, k, metadata.AnyVersion)
		wantErr(t, fmt.Sprintf("Delete(%q)", k), err, metadata.ErrInvalidKey)
	}
	for _, k := range []string{"", "a", "/a/", "//a"} {
		_, err := e.s.Children(e.ctx, k)
		wantErr(t, fmt.Sprintf("Children(%q)", k), err, metadata.ErrInvalidKey)
		_, err = e.s.Watch(e.ctx, k, 0)
		wantErr(t, fmt.Sprintf("Watch(%q)", k), err, metadata.ErrInvalidKey)
	}
	_, err := e.s.NextID(e.ctx, "")
	wantErr(t, "NextID(\"\")", err, metadata.ErrInvalidKey)
}

func testGetPutCAS(t *testing.T, e *env) {
	const k = "/kv/a"
	e.mustAbsent(t, k)
	v1, err := e.s.Put(e.ctx, k, []byte("one"), metadata.AnyVersion)
	if err != nil {
		t.Fatal(err)
	}
	if v1 <= 0 {
		t.Fatalf("version %d, want > 0", v1)
	}
	kv, err := e.s.Get(e.ctx, k)
	if err != nil || kv.Key != k || string(kv.Value) != "one" || kv.Version != v1 || kv.Ephemeral {
		t.Fatalf("Get = %+v, %v; want one@%d persistent", kv, err, v1)
	}
	v2, err := e.s.Put(e.ctx, k, []byte("two"), v1)
	if err != nil || v2 <= v1 {
		t.Fatalf("CAS put = %d, %v; want version > %d", v2, err, v1)
	}
	_, err = e.s.Put(e.ctx, k, []byte("stale"), v1)
	wantErr(t, "CAS with stale version", err, metadata.ErrBadVersion)
	_, err = e.s.Put(e.ctx, "/kv/absent", []byte("x"), v2)
	wantErr(t, "CAS on absent key", err, metadata.ErrBadVersion)
	e.mustAbsent(t, "/kv/absent")
	if kv, _ := e.s.Get(e.ctx, k); string(kv.Value) != "two" || kv.Version != v2 {
		t.Fatalf("after failed CAS Get = %+v; want two@%d", kv, v2)
	}
	v3, err := e.s.Put(e.ctx, k, nil, metadata.AnyVersion)
	if err != nil || v3 <= v2 {
		t.Fatalf("unconditional put = %d, %v", v3, err)
	}
	if kv, _ := e.s.Get(e.ctx, k); len(kv.Value) != 0 || kv.Version != v3 {
		t.Fatalf("empty value Get = %+v; want empty@%d", kv, v3)
	}
	// A returned value is the caller's copy.
	val := []byte("mine")
	v4, _ := e.s.Put(e.ctx, k, val, v3)
	val[0] = 'X'
	kv, _ = e.s.Get(e.ctx, k)
	if string(kv.Value) != "mine" || kv.Version != v4 {
		t.Fatalf("Get = %+v; want mine@%d", kv, v4)
	}
	kv.Value[0] = 'Y'
	if kv2, _ := e.s.Get(e.ctx, k); string(kv2.Value) != "mine" {
		t.Fatalf("store aliases returned value: %q", kv2.Value)
	}
}

func testCreateIfAbsent(t *testing.T, e *env) {
	const k = "/create/a"
	v, err := e.s.Create(e.ctx, k, []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.s.Create(e.ctx, k, []byte("second"))
	wantErr(t, "second Create", err, metadata.ErrExists)
	_, err = e.s.Put(e.ctx, k, []byte("second"), metadata.NotExists)
	wantErr(t, "Put NotExists", err, metadata.ErrExists)
	if kv, _ := e.s.Get(e.ctx, k); string(kv.Value) != "first" || kv.Version != v {
		t.Fatalf("Get = %+v; want first@%d", kv, v)
	}
	// Racing creators: exactly one wins.
	const n = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for i := range n {
		wg.Go(func() {
			_, err := e.s.Create(e.ctx, "/create/race", []byte(strconv.Itoa(i)))
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
			case !errors.Is(err, metadata.ErrExists):
				t.Errorf("Create: %v", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d creators won, want 1", wins)
	}
}

// testCreateUnless: the key is created only while it and every guard key
// are absent; the error names the key found; a guard and a creator of it
// racing never both win.
func testCreateUnless(t *testing.T, e *env) {
	const k, g1, g2 = "/unless/topic", "/unless/guards/a", "/unless/guards/b"
	v, err := e.s.CreateUnless(e.ctx, k, []byte("v"), g1, g2)
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := e.s.Get(e.ctx, k); err != nil || string(kv.Value) != "v" || kv.Version != v {
		t.Fatalf("Get = %+v, %v; want v@%d", kv, err, v)
	}
	_, err = e.s.CreateUnless(e.ctx, k, []byte("w"), g1)
	wantErr(t, "CreateUnless of an existing key", err, metadata.ErrExists)
	if !strings.Contains(err.Error(), k) {
		t.Errorf("error %q does not name %s", err, k)
	}
	e.put(t, g2, "guard")
	_, err = e.s.CreateUnless(e.ctx, "/unless/other", []byte("w"), g1, g2)
	wantErr(t, "CreateUnless with a guard present", err, metadata.ErrExists)
	if !strings.Contains(err.Error(), g2) {
		t.Errorf("error %q does not name the guard %s", err, g2)
	}
	e.mustAbsent(t, "/unless/other")
	if _, err := e.s.CreateUnless(e.ctx, "/unless/bad/", nil, g1); err == nil {
		t.Error("CreateUnless accepted an invalid key")
	}
	if _, err := e.s.CreateUnless(e.ctx, "/unless/x", nil, "bad"); err == nil {
		t.Error("CreateUnless accepted an invalid guard")
	}
	// A creator of the guard and a guarded creator race: at most one wins.
	for i := range 10 {
		key, guard := "/unless/race/k"+strconv.Itoa(i), "/unless/race/g"+strconv.Itoa(i)
		var wg sync.WaitGroup
		var errK, errG error
		wg.Go(func() { _, errK = e.s.CreateUnless(e.ctx, key, nil, guard) })
		wg.Go(func() { _, errG = e.s.CreateUnless(e.ctx, guard, nil, key) })
		wg.Wait()
		if errK == nil && errG == nil {
			t.Fatalf("round %d: both the key and its guard were created", i)
		}
		if errK != nil && errG != nil {
			t.Fatalf("round %d: neither was created: %v; %v", i, errK, errG)
		}
	}
}

func testVersionsNeverRepeat(t *testing.T, e *env) {
	const k = "/ver/a"
	seen := map[metadata.Version]bool{}
	last := metadata.Version(0)
	for i := range 3 {
		v, err := e.s.Create(e.ctx, k, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		v2 := e.put(t, k, "y")
		for _, x := range []metadata.Version{v, v2} {
			if x <= last || seen[x] {
				t.Fatalf("round %d: version %d after %d", i, x, last)
			}
			seen[x], last = true, x
		}
		if err := e.s.Delete(e.ctx, k, v2); err != nil {
			t.Fatal(err)
		}
	}
	// A version from before the delete must not match the re-created key.
	old := last
	if _, err := e.s.Create(e.ctx, k, []byte("z")); err != nil {
		t.Fatal(err)
	}
	_, err := e.s.Put(e.ctx, k, []byte("w"), old)
	wantErr(t, "CAS with pre-delete version", err, metadata.ErrBadVersion)
}

func testDelete(t *testing.T, e *env) {
	const k = "/del/a"
	wantErr(t, "Delete absent", e.s.Delete(e.ctx, k, metadata.AnyVersion), metadata.ErrNotFound)
	wantErr(t, "Delete absent with version", e.s.Delete(e.ctx, k, 5), metadata.ErrNotFound)
	v1 := e.put(t, k, "1")
	v2 := e.put(t, k, "2")
	wantErr(t, "Delete stale", e.s.Delete(e.ctx, k, v1), metadata.ErrBadVersion)
	wantErr(t, "Delete NotExists", e.s.Delete(e.ctx, k, metadata.NotExists), metadata.ErrBadVersion)
	if err := e.s.Delete(e.ctx, k, v2); err != nil {
		t.Fatalf("Delete with version: %v", err)
	}
	e.mustAbsent(t, k)
	e.put(t, k, "3")
	if err := e.s.Delete(e.ctx, k, metadata.AnyVersion); err != nil {
		t.Fatalf("Delete any: %v", err)
	}
	e.mustAbsent(t, k)
	// Deleting a parent leaves its children.
	e.put(t, "/del/p", "")
	e.put(t, "/del/p/c", "")
	if err := e.s.Delete(e.ctx, "/del/p", metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Get(e.ctx, "/del/p/c"); err != nil {
		t.Fatalf("child after parent delete: %v", err)
	}
}

func (e *env) children(t *testing.T, parent string) []string {
	t.Helper()
	c, err := e.s.Children(e.ctx, parent)
	if err != nil {
		t.Fatalf("Children(%s): %v", parent, err)
	}
	return c
}

func testChildren(t *testing.T, e *env) {
	for _, k := range []string{
		"/ch/p", "/ch/p/b", "/ch/p/a", "/ch/p/a/x", "/ch/p/a/y/z",
		"/ch/p/c/deep/er", "/ch/p/c.d", "/ch/p/c-e/f", "/ch/p/c/0",
		"/ch/pq/no", "/ch/p0", "/ch/p.x/no",
	} {
		e.put(t, k, "v")
	}
	for _, tc := range []struct {
		parent string
		want   []string
	}{
		{"/ch/p", []string{"a", "b", "c", "c-e", "c.d"}},
		{"/ch/p/a", []string{"x", "y"}},
		{"/ch/p/a/y", []string{"z"}},
		{"/ch/p/c", []string{"0", "deep"}},
		{"/ch/p/b", nil},
		{"/ch/absent", nil},
		{"/ch", []string{"p", "p.x", "p0", "pq"}},
		{"/", []string{"ch"}},
	} {
		got := e.children(t, tc.parent)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Children(%s) = %q, want %q", tc.parent, got, tc.want)
		}
	}
	if err := e.s.Delete(e.ctx, "/ch/p/b", metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if got := e.children(t, "/ch/p"); !slices.Equal(got, []string{"a", "c", "c-e", "c.d"}) {
		t.Errorf("after delete Children = %q", got)
	}
}

func testChildrenMany(t *testing.T, e *env) {
	// Children with and without subtrees, interleaved, to exercise paging.
	const n = 150
	var want []string
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		name := fmt.Sprintf("c%03d", i)
		want = append(want, name)
		var keys []string
		switch i % 3 {
		case 0:
			keys = []string{"/many/" + name}
		case 1:
			keys = []string{"/many/" + name + "/g1", "/many/" + name + "/g2/x", "/many/" + name + "/g3"}
		case 2:
			keys = []string{"/many/" + name, "/many/" + name + "/g"}
		}
		for _, k := range keys {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if _, err := e.s.Put(e.ctx, k, nil, metadata.AnyVersion); err != nil {
					t.Errorf("Put(%s): %v", k, err)
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if got := e.children(t, "/many"); !slices.Equal(got, want) {
		t.Fatalf("Children(/many) = %d names %q, want %d", len(got), got, len(want))
	}
	if got := e.children(t, "/many/c001"); !slices.Equal(got, []string{"g1", "g2", "g3"}) {
		t.Fatalf("Children(/many/c001) = %q", got)
	}
}

func testRevision(t *testing.T, e *env) {
	r0, err := e.s.Revision(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := e.put(t, "/rev/a", "x")
	r1, err := e.s.Revision(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r1 <= r0 || int64(v) > r1 {
		t.Fatalf("revision %d -> %d around write at version %d", r0, r1, v)
	}
}

func testWatchOrder(t *testing.T, e *env) {
	w := e.watch(t, "/w/a", 0)
	e.put(t, "/w/a", "1")
	e.put(t, "/w/ab", "sibling") // not under /w/a
	e.put(t, "/w/a/x", "2")
	e.put(t, "/w/a.b", "sibling")
	e.put(t, "/w/a/x/y", "3")
	e.put(t, "/w/a", "4")
	if err := e.s.Delete(e.ctx, "/w/a/x", metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	e.put(t, "/w/b", "outside")
	e.put(t, "/w/a/end", "5")
	got := e.recv(t, w, 6)
	checkEvents(t, got, []ev{
		{metadata.EventPut, "/w/a", "1"},
		{metadata.EventPut, "/w/a/x", "2"},
		{metadata.EventPut, "/w/a/x/y", "3"},
		{metadata.EventPut, "/w/a", "4"},
		{metadata.EventDelete, "/w/a/x", ""},
		{metadata.EventPut, "/w/a/end", "5"},
	})
	kv, err := e.s.Get(e.ctx, "/w/a/end")
	if err != nil || int64(kv.Version) != got[5].Revision {
		t.Fatalf("event revision %d, key version %d (%v)", got[5].Revision, kv.Version, err)
	}
}

func testWatchResume(t *testing.T, e *env) {
	first := e.put(t, "/res/k", "0")
	for i := 1; i < 10; i++ {
		e.put(t, "/res/k", strconv.Itoa(i))
	}
	// Replay from the first write.
	w := e.watch(t, "/res", int64(first))
	got := e.recv(t, w, 5)
	w.Close()
	if _, ok := <-w.Events(); ok {
		t.Fatal("Events open after Close")
	}
	want := make([]ev, 0, 15)
	for i := range 15 {
		want = append(want, ev{metadata.EventPut, "/res/k", strconv.Itoa(i)})
	}
	checkEvents(t, got, want[:5])
	for i := 10; i < 15; i++ {
		e.put(t, "/res/k", strconv.Itoa(i))
	}
	// Resume right after the last event seen: nothing lost or repeated.
	w2 := e.watch(t, "/res", got[4].Revision+1)
	rest := e.recv(t, w2, 10)
	checkEvents(t, append(got, rest...), want)
	// Nothing more: the next event is a marker written now.
	e.put(t, "/res/marker", "m")
	checkEvents(t, e.recv(t, w2, 1), []ev{{metadata.EventPut, "/res/marker", "m"}})
}

func testWatchRoot(t *testing.T, e *env) {
	w := e.watch(t, "/", 0)
	e.put(t, "/r1", "a")
	e.put(t, "/r2/x", "b")
	checkEvents(t, e.recv(t, w, 2), []ev{{metadata.EventPut, "/r1", "a"}, {metadata.EventPut, "/r2/x", "b"}})
}

func testWatchEnd(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	w, err := e.s.Watch(ctx, "/end", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cancel()
	for range w.Events() {
	}
	if err := w.Err(); err != nil {
		t.Fatalf("Err after cancel = %v, want nil", err)
	}
	w2 := e.watch(t, "/end", 0)
	w2.Close()
	for range w2.Events() {
	}
	if err := w2.Err(); err != nil {
		t.Fatalf("Err after Close = %v, want nil", err)
	}
}

// watchErr returns the error of a watch from rev, from Watch itself or from
// the watcher once its channel closes.
func (e *env) watchErr(t *testing.T, prefix string, rev int64) error {
	t.Helper()
	w, err := e.s.Watch(e.ctx, prefix, rev)
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		select {
		case _, ok := <-w.Events():
			if !ok {
				return w.Err()
			}
		case <-e.ctx.Done():
			t.Fatalf("watch from %d neither failed nor ended", rev)
		}
	}
}

func testWatchCompacted(t *testing.T, e *env) {
	if e.h.Compact == nil {
		t.Skip("backend cannot compact on demand")
	}
	first := e.put(t, "/cmp/k", "0")
	for i := 1; i < 5; i++ {
		e.put(t, "/cmp/k", strconv.Itoa(i))
	}
	last := e.put(t, "/cmp/k", "5")
	e.h.Compact(t, e.s, int64(last))
	wantErr(t, "watch from compacted revision", e.watchErr(t, "/cmp", int64(first)), metadata.ErrCompacted)
	w := e.watch(t, "/cmp", int64(last))
	checkEvents(t, e.recv(t, w, 1), []ev{{metadata.EventPut, "/cmp/k", "5"}})
}

func testWatchAcrossRestart(t *testing.T, e *env) {
	if e.h.Restart == nil {
		t.Skip("backend has no server to restart")
	}
	w := e.watch(t, "/rs", 0)
	var want []ev
	for i := range 5 {
		e.put(t, "/rs/k", strconv.Itoa(i))
		want = append(want, ev{metadata.EventPut, "/rs/k", strconv.Itoa(i)})
	}
	got := e.recv(t, w, 5)
	e.h.Restart(t, e.s)
	for i := 5; i < 10; i++ {
		v := strconv.Itoa(i)
		e.eventually(t, "put after restart", func() error {
			ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
			defer cancel()
			// Create-or-update keeps a retried write from applying twice.
			_, err := e.s.Create(ctx, "/rs/k"+v, []byte(v))
			if errors.Is(err, metadata.ErrExists) {
				return nil
			}
			return err
		})
		want = append(want, ev{metadata.EventPut, "/rs/k" + v, v})
	}
	got = append(got, e.recv(t, w, 5)...)
	checkEvents(t, got, want)
	e.put(t, "/rs/marker", "m")
	checkEvents(t, e.recv(t, w, 1), []ev{{metadata.EventPut, "/rs/marker", "m"}})
}

func testEphemeralOnClose(t *testing.T, e *env) {
	sess := e.session(t)
	v, err := sess.CreateEphemeral(e.ctx, "/eph/a", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := e.s.Get(e.ctx, "/eph/a")
	if err != nil || !kv.Ephemeral || kv.Version != v || string(kv.Value) != "x" {
		t.Fatalf("Get = %+v, %v; want ephemeral x@%d", kv, err, v)
	}
	_, err = sess.CreateEphemeral(e.ctx, "/eph/a", []byte("y"))
	wantErr(t, "second CreateEphemeral", err, metadata.ErrExists)
	_, err = sess.PutEphemeral(e.ctx, "/eph/a", []byte("y"), v+1000)
	wantErr(t, "PutEphemeral stale", err, metadata.ErrBadVersion)
	v2, err := sess.PutEphemeral(e.ctx, "/eph/a", []byte("y"), v)
	if err != nil || v2 <= v {
		t.Fatalf("PutEphemeral = %d, %v", v2, err)
	}
	if _, err := sess.CreateEphemeral(e.ctx, "/eph/b", nil); err != nil {
		t.Fatal(err)
	}
	e.put(t, "/eph/persistent", "p")
	select {
	case <-sess.Done():
		t.Fatal("Done closed on a live session")
	default:
	}
	w := e.watch(t, "/eph", 0)
	if err := sess.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	e.waitClosed(t, sess.Done(), "Done after Close")
	e.mustAbsent(t, "/eph/a")
	e.mustAbsent(t, "/eph/b")
	if _, err := e.s.Get(e.ctx, "/eph/persistent"); err != nil {
		t.Fatalf("persistent key: %v", err)
	}
	got := e.recv(t, w, 2)
	slices.SortFunc(got, func(a, b metadata.Event) int {
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	checkEvents(t, got[:1], []ev{{metadata.EventDelete, "/eph/a", ""}})
	checkEvents(t, got[1:], []ev{{metadata.EventDelete, "/eph/b", ""}})
	_, err = sess.CreateEphemeral(e.ctx, "/eph/c", nil)
	wantErr(t, "CreateEphemeral after Close", err, metadata.ErrSessionLost)
}

func testEphemeralOnExpiry(t *testing.T, e *env) {
	if e.h.ExpireSession == nil {
		t.Skip("backend cannot expire a session on demand")
	}
	sess := e.session(t)
	other := e.session(t)
	for _, k := range []string{"/exp/a", "/exp/b/c"} {
		if _, err := sess.CreateEphemeral(e.ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.CreateEphemeral(e.ctx, "/exp/other", nil); err != nil {
		t.Fatal(err)
	}
	e.h.ExpireSession(t, e.s, sess)
	e.waitClosed(t, sess.Done(), "Done after expiry")
	e.eventually(t, "ephemeral keys to vanish", func() error {
		for _, k := range []string{"/exp/a", "/exp/b/c"} {
			if _, err := e.s.Get(e.ctx, k); !errors.Is(err, metadata.ErrNotFound) {
				return fmt.Errorf("%s still there (%v)", k, err)
			}
		}
		return nil
	})
	_, err := sess.CreateEphemeral(e.ctx, "/exp/late", nil)
	wantErr(t, "CreateEphemeral on lost session", err, metadata.ErrSessionLost)
	e.mustAbsent(t, "/exp/late")
	if _, err := e.s.Get(e.ctx, "/exp/other"); err != nil {
		t.Fatalf("other session's key: %v", err)
	}
	select {
	case <-other.Done():
		t.Fatal("other session lost too")
	default:
	}
	// The key can be taken over by a new session.
	if _, err := other.CreateEphemeral(e.ctx, "/exp/a", nil); err != nil {
		t.Fatalf("take over: %v", err)
	}
}

func testEphemeralOwnership(t *testing.T, e *env) {
	s1, s2 := e.session(t), e.session(t)
	v, err := s1.CreateEphemeral(e.ctx, "/own/a", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.PutEphemeral(e.ctx, "/own/a", []byte("2"), v)
	wantErr(t, "PutEphemeral on another session's key", err, metadata.ErrBadVersion)
	_, err = s2.PutEphemeral(e.ctx, "/own/a", []byte("2"), metadata.AnyVersion)
	wantErr(t, "PutEphemeral any on another session's key", err, metadata.ErrBadVersion)
	e.put(t, "/own/p", "persistent")
	_, err = s1.PutEphemeral(e.ctx, "/own/p", []byte("2"), metadata.AnyVersion)
	wantErr(t, "PutEphemeral on a persistent key", err, metadata.ErrBadVersion)
	// AnyVersion creates when absent and updates own keys.
	if _, err := s2.PutEphemeral(e.ctx, "/own/b", []byte("1"), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.PutEphemeral(e.ctx, "/own/b", []byte("2"), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if kv, _ := e.s.Get(e.ctx, "/own/a"); string(kv.Value) != "1" {
		t.Fatalf("/own/a = %q", kv.Value)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	e.mustAbsent(t, "/own/b")
	if _, err := e.s.Get(e.ctx, "/own/a"); err != nil {
		t.Fatalf("s1's key after s2 closed: %v", err)
	}
}

type electResult struct {
	l   metadata.Leadership
	err error
}

func (e *env) elect(ctx context.Context, sess metadata.Session, election, value string) <-chan electResult {
	ch := make(chan electResult, 1)
	go func() {
		l, err := sess.Elect(ctx, election, []byte(value))
		ch <- electResult{l, err}
	}()
	return ch
}

func (e *env) leaderIs(t *testing.T, sess metadata.Session, election, want string) {
	t.Helper()
	kv, err := sess.Leader(e.ctx, election)
	if err != nil || string(kv.Value) != want {
		t.Fatalf("Leader = %+v, %v; want %q", kv, err, want)
	}
}

// pending checks that an election result has not arrived. It cannot prove
// that it never will; the later checks of the test catch a wrong winner.
func pending(t *testing.T, ch <-chan electResult, who string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s elected while another leads: %+v", who, r)
	case <-time.After(200 * time.Millisecond):
	}
}

func (e *env) won(t *testing.T, ch <-chan electResult, who string) metadata.Leadership {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s Elect: %v", who, r.err)
		}
		return r.l
	case <-e.ctx.Done():
		t.Fatalf("%s never elected", who)
	}
	return nil
}

func testElection(t *testing.T, e *env) {
	const el = "/elect/leader"
	s1, s2, s3 := e.session(t), e.session(t), e.session(t)
	_, err := s1.Leader(e.ctx, el)
	wantErr(t, "Leader before any candidate", err, metadata.ErrNotFound)
	l1, err := s1.Elect(e.ctx, el, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	e.leaderIs(t, s2, el, "one")
	kv, err := e.s.Get(e.ctx, l1.Key())
	if err != nil || kv.Version != l1.Version() || !kv.Ephemeral || !metadata.InSubtree(l1.Key(), el) {
		t.Fatalf("leader key %s: %+v, %v; want ephemeral at version %d", l1.Key(), kv, err, l1.Version())
	}
	c2 := e.elect(e.ctx, s2, el, "two")
	// Make sure s2 is a candidate before s3 so that s2 is next in line.
	e.eventually(t, "second candidate", func() error {
		c, err := e.s.Children(e.ctx, el)
		if err == nil && len(c) != 2 {
			err = fmt.Errorf("%d candidates", len(c))
		}
		return err
	})
	c3 := e.elect(e.ctx, s3, el, "three")
	pending(t, c2, "second candidate")
	e.leaderIs(t, s3, el, "one")
	select {
	case <-l1.Lost():
		t.Fatal("leadership lost while held")
	default:
	}
	if err := l1.Resign(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.waitClosed(t, l1.Lost(), "Lost after Resign")
	l2 := e.won(t, c2, "second candidate")
	e.leaderIs(t, s1, el, "two")
	pending(t, c3, "third candidate")
	// The old leader's fence no longer holds.
	_, err = e.s.Put(e.ctx, l1.Key(), []byte("stale"), l1.Version())
	wantErr(t, "write fenced by the resigned leader key", err, metadata.ErrBadVersion)
	// Closing the session ends leadership too.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	e.waitClosed(t, l2.Lost(), "Lost after session Close")
	l3 := e.won(t, c3, "third candidate")
	e.leaderIs(t, s1, el, "three")
	if err := l3.Resign(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.eventually(t, "no leader", func() error {
		if _, err := s1.Leader(e.ctx, el); !errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("Leader err = %v", err)
		}
		return nil
	})
}

func testElectionSessionExpiry(t *testing.T, e *env) {
	if e.h.ExpireSession == nil {
		t.Skip("backend cannot expire a session on demand")
	}
	const el = "/elect/exp"
	s1, s2 := e.session(t), e.session(t)
	l1, err := s1.Elect(e.ctx, el, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	c2 := e.elect(e.ctx, s2, el, "two")
	pending(t, c2, "second candidate")
	e.h.ExpireSession(t, e.s, s1)
	e.waitClosed(t, l1.Lost(), "Lost after expiry")
	e.waitClosed(t, s1.Done(), "Done after expiry")
	l2 := e.won(t, c2, "second candidate")
	e.leaderIs(t, s2, el, "two")
	kv, err := e.s.Get(e.ctx, l2.Key())
	if err != nil || kv.Version != l2.Version() {
		t.Fatalf("leader key = %+v, %v; want version %d", kv, err, l2.Version())
	}
	// A lost session cannot campaign.
	_, err = s1.Elect(e.ctx, el, []byte("again"))
	wantErr(t, "Elect on lost session", err, metadata.ErrSessionLost)
	// A candidate whose session expires while waiting gets ErrSessionLost.
	s3 := e.session(t)
	c3 := e.elect(e.ctx, s3, el, "three")
	pending(t, c3, "third candidate")
	e.h.ExpireSession(t, e.s, s3)
	select {
	case r := <-c3:
		wantErr(t, "Elect when the session expires", r.err, metadata.ErrSessionLost)
	case <-e.ctx.Done():
		t.Fatal("Elect did not return after session expiry")
	}
	e.leaderIs(t, s2, el, "two")
}

func testElectionCancel(t *testing.T, e *env) {
	const el = "/elect/cancel"
	s1, s2 := e.session(t), e.session(t)
	if _, err := s1.Elect(e.ctx, el, []byte("one")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	c2 := e.elect(ctx, s2, el, "two")
	pending(t, c2, "second candidate")
	cancel()
	select {
	case r := <-c2:
		if r.err == nil {
			t.Fatal("Elect succeeded after cancel")
		}
	case <-e.ctx.Done():
		t.Fatal("Elect did not return after cancel")
	}
	// The canceled candidate withdrew.
	e.eventually(t, "canceled candidate to withdraw", func() error {
		c, err := e.s.Children(e.ctx, el)
		if err == nil && len(c) != 1 {
			err = fmt.Errorf("candidates %q", c)
		}
		return err
	})
	e.leaderIs(t, s2, el, "one")
}

func testNextIDConcurrent(t *testing.T, e *env) {
	const workers, per = 6, 20
	ids := make(chan int64, workers*per)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range per {
				id, err := e.s.NextID(e.ctx, "ledgers")
				if err != nil {
					t.Errorf("NextID: %v", err)
					return
				}
				ids <- id
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := make(map[int64]bool)
	for id := range ids {
		if seen[id] {
			t.Fatalf("id %d handed out twice", id)
		}
		seen[id] = true
	}
	for i := int64(1); i <= workers*per; i++ {
		if !seen[i] {
			t.Fatalf("id %d missing: sequence is not 1..%d", i, workers*per)
		}
	}
	if id, err := e.s.NextID(e.ctx, "other/seq"); err != nil || id != 1 {
		t.Fatalf("first id of another sequence = %d, %v", id, err)
	}
	if id, err := e.s.NextID(e.ctx, "ledgers"); err != nil || id != workers*per+1 {
		t.Fatalf("next id = %d, %v; want %d", id, err, workers*per+1)
	}
}

func testConcurrentCAS(t *testing.T, e *env) {
	const workers, per = 6, 15
	const k = "/cas/counter"
	if _, err := e.s.Create(e.ctx, k, []byte("0")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range per {
				for {
					kv, err := e.s.Get(e.ctx, k)
					if err != nil {
						t.Errorf("Get: %v", err)
						return
					}
					n, _ := strconv.Atoi(string(kv.Value))
					_, err = e.s.Put(e.ctx, k, []byte(strconv.Itoa(n+1)), kv.Version)
					if err == nil {
						break
					}
					if !errors.Is(err, metadata.ErrBadVersion) {
						t.Errorf("Put: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	kv, err := e.s.Get(e.ctx, k)
	if err != nil || !bytes.Equal(kv.Value, []byte(strconv.Itoa(workers*per))) {
		t.Fatalf("counter = %q, %v; want %d", kv.Value, err, workers*per)
	}
}

func testClosed(t *testing.T, e *env) {
	sess := e.session(t)
	w := e.watch(t, "/closed", 0)
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := e.s.Get(e.ctx, "/closed/a")
	wantErr(t, "Get after Close", err, metadata.ErrClosed)
	_, err = e.s.Put(e.ctx, "/closed/a", nil, metadata.AnyVersion)
	wantErr(t, "Put after Close", err, metadata.ErrClosed)
	_, err = e.s.NewSession(e.ctx, e.h.ttl())
	wantErr(t, "NewSession after Close", err, metadata.ErrClosed)
	e.waitClosed(t, sess.Done(), "session Done after store Close")
	for range w.Events() {
	}
	if err := w.Err(); err != nil {
		t.Fatalf("watch Err after store Close = %v, want nil", err)
	}
}
