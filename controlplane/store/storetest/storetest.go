package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// Run runs the conformance suite. open returns a new, empty Store each time
// it is called; Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CRUD", testCRUD},
		{"AlreadyExists", testAlreadyExists},
		{"NotFound", testNotFound},
		{"EtagMismatch", testEtagMismatch},
		{"UID", testUID},
		{"RequestID", testRequestID},
		{"ListFilters", testListFilters},
		{"ListPagination", testListPagination},
		{"ListWalkWhileWriting", testListWalkWhileWriting},
		{"PageSize", testPageSize},
		{"InvalidPageToken", testInvalidPageToken},
		{"Count", testCount},
		{"Changes", testChanges},
		{"Revision", testRevision},
		{"Audit", testAudit},
		{"TxCommit", testTxCommit},
		{"TxRollback", testTxRollback},
		{"TxPanic", testTxPanic},
		{"ConcurrentIncrements", testConcurrentIncrements},
		{"Times", testTimes},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// Reopener opens a Store on one fixed backing location (a file, a
// database); RunDurable calls it several times, each after closing the
// Store it returned before.
type Reopener func(t *testing.T) store.Store

// RunDurable runs the subtests that need a store to survive Close:
// persistence of every kind of record, and an idempotent schema set-up on
// every re-open. location prepares a fresh, empty backing location and
// returns how to open it.
func RunDurable(t *testing.T, location func(t *testing.T) Reopener) {
	t.Run("Persistence", func(t *testing.T) { testPersistence(t, location(t)) })
	t.Run("ReopenIdempotent", func(t *testing.T) { testReopenIdempotent(t, location(t)) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func obj(kind, name, parent, org string, data string) store.Object {
	return store.Object{Kind: kind, Name: name, Parent: parent, Org: org, Data: []byte(data)}
}

func mustCreate(t *testing.T, s store.Writer, o store.Object) store.Object {
	t.Helper()
	got, err := s.Create(ctxT(t), o, "")
	if err != nil {
		t.Fatalf("Create(%s %s): %v", o.Kind, o.Name, err)
	}
	return got
}

// sameObject compares everything the store returns for one version of an
// object.
func sameObject(t *testing.T, what string, got, want store.Object) {
	t.Helper()
	if got.Kind != want.Kind || got.Name != want.Name || got.Parent != want.Parent || got.Org != want.Org ||
		got.UID != want.UID || !bytes.Equal(got.Data, want.Data) || got.Etag != want.Etag || got.Seq != want.Seq ||
		got.Revision != want.Revision || !got.CreateTime.Equal(want.CreateTime) || !got.UpdateTime.Equal(want.UpdateTime) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func testCRUD(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	in := obj("clusters", "organizations/acme/clusters/prod", "organizations/acme", "organizations/acme", `{"size":3}`)
	in.Etag, in.Seq, in.Revision = "ignored", 99, 99 // set by the store
	c, err := s.Create(ctx, in, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != in.Kind || c.Name != in.Name || c.Parent != in.Parent || c.Org != in.Org || string(c.Data) != `{"size":3}` {
		t.Fatalf("Create returned %+v", c)
	}
	if c.UID == "" || c.Etag == "" || c.Etag == "ignored" || c.Seq <= 0 || c.Revision <= 0 {
		t.Fatalf("Create did not set uid/etag/seq/revision: %+v", c)
	}
	if c.CreateTime.IsZero() || !c.CreateTime.Equal(c.UpdateTime) || c.CreateTime.Location() != time.UTC {
		t.Fatalf("Create times: %v %v", c.CreateTime, c.UpdateTime)
	}
	g, err := s.Get(ctx, c.Kind, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameObject(t, "Get after Create", g, c)

	up := c
	up.Data = []byte(`{"size":5}`)
	up.Org, up.Parent, up.UID = "organizations/other", "elsewhere", "other-uid" // must be ignored
	u, err := s.Update(ctx, up, c.Etag)
	if err != nil {
		t.Fatal(err)
	}
	if string(u.Data) != `{"size":5}` || u.Org != c.Org || u.Parent != c.Parent || u.UID != c.UID || u.Seq != c.Seq {
		t.Fatalf("Update returned %+v (created %+v)", u, c)
	}
	if u.Etag == c.Etag || u.Revision <= c.Revision || !u.CreateTime.Equal(c.CreateTime) || u.UpdateTime.Before(c.UpdateTime) {
		t.Fatalf("Update did not advance etag/revision/time: %+v (created %+v)", u, c)
	}
	g, err = s.Get(ctx, c.Kind, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	sameObject(t, "Get after Update", g, u)

	// An unconditional update (empty etag) also changes the etag.
	u2, err := s.Update(ctx, store.Object{Kind: c.Kind, Name: c.Name, Data: nil}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(u2.Data) != 0 || u2.Etag == u.Etag {
		t.Fatalf("unconditional Update: %+v", u2)
	}

	if err := s.Delete(ctx, c.Kind, c.Name, u2.Etag); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, c.Kind, c.Name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	// The name can be used again; the new object is a new one.
	c2 := mustCreate(t, s, in)
	if c2.UID == c.UID || c2.Seq <= c.Seq || c2.Etag == c.Etag || c2.Etag == u2.Etag {
		t.Fatalf("re-created object %+v looks like the deleted %+v", c2, c)
	}
}

func testAlreadyExists(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	first := mustCreate(t, s, obj("organizations", "organizations/acme", "", "organizations/acme", "1"))
	_, err := s.Create(ctx, obj("organizations", "organizations/acme", "", "organizations/acme", "2"), "")
	if !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("second Create: %v, want ErrAlreadyExists", err)
	}
	g, err := s.Get(ctx, "organizations", "organizations/acme")
	if err != nil {
		t.Fatal(err)
	}
	sameObject(t, "after failed Create", g, first)
	// The same name in another kind is another object.
	mustCreate(t, s, obj("regions", "organizations/acme", "", "", "3"))
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	if _, err := s.Get(ctx, "clusters", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get: %v", err)
	}
	if _, err := s.GetByUID(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetByUID: %v", err)
	}
	if _, err := s.Update(ctx, obj("clusters", "nope", "", "", "x"), ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Update: %v", err)
	}
	if err := s.Delete(ctx, "clusters", "nope", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete: %v", err)
	}
	mustCreate(t, s, obj("clusters", "c1", "", "", ""))
	if _, err := s.Get(ctx, "regions", "c1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get with the wrong kind: %v", err)
	}
	if rev, err := s.Revision(ctx); err != nil || rev != 1 {
		t.Errorf("failed writes advanced the revision: %d, %v", rev, err)
	}
}

func testEtagMismatch(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCreate(t, s, obj("apiKeys", "k1", "", "", "v1"))
	u, err := s.Update(ctx, obj("apiKeys", "k1", "", "", "v2"), c.Etag)
	if err != nil {
		t.Fatal(err)
	}
	// The old etag no longer works, for Update and Delete.
	if _, err := s.Update(ctx, obj("apiKeys", "k1", "", "", "v3"), c.Etag); !errors.Is(err, store.ErrEtagMismatch) {
		t.Fatalf("Update with stale etag: %v", err)
	}
	if err := s.Delete(ctx, "apiKeys", "k1", c.Etag); !errors.Is(err, store.ErrEtagMismatch) {
		t.Fatalf("Delete with stale etag: %v", err)
	}
	if err := s.Delete(ctx, "apiKeys", "k1", `"garbage"`); !errors.Is(err, store.ErrEtagMismatch) {
		t.Fatalf("Delete with made-up etag: %v", err)
	}
	g, err := s.Get(ctx, "apiKeys", "k1")
	if err != nil {
		t.Fatal(err)
	}
	sameObject(t, "after rejected writes", g, u)
	// Empty etag: unconditional.
	if _, err := s.Update(ctx, obj("apiKeys", "k1", "", "", "v4"), ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "apiKeys", "k1", ""); err != nil {
		t.Fatal(err)
	}
	// Etags are opaque quoted strings.
	if len(c.Etag) < 2 || c.Etag[0] != '"' || c.Etag[len(c.Etag)-1] != '"' {
		t.Errorf("etag %s is not a quoted string", c.Etag)
	}
}

func testUID(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := obj("apiKeys", "organizations/acme/apiKeys/a", "organizations/acme", "organizations/acme", "a")
	a.UID = "AKIA-public-1"
	ca := mustCreate(t, s, a)
	if ca.UID != "AKIA-public-1" {
		t.Fatalf("UID %q", ca.UID)
	}
	g, err := s.GetByUID(ctx, "AKIA-public-1")
	if err != nil {
		t.Fatal(err)
	}
	sameObject(t, "GetByUID", g, ca)

	// UIDs are unique across kinds.
	b := obj("serviceAccounts", "organizations/acme/serviceAccounts/b", "organizations/acme", "organizations/acme", "b")
	b.UID = "AKIA-public-1"
	if _, err := s.Create(ctx, b, ""); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("Create with a taken UID: %v", err)
	}
	if _, err := s.Get(ctx, b.Kind, b.Name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rejected Create left an object: %v", err)
	}
	// Generated UIDs are distinct and findable.
	seen := map[string]bool{}
	for i := range 20 {
		c := mustCreate(t, s, obj("clusters", fmt.Sprintf("c%d", i), "", "", ""))
		if c.UID == "" || seen[c.UID] {
			t.Fatalf("generated UID %q empty or repeated", c.UID)
		}
		seen[c.UID] = true
		g, err := s.GetByUID(ctx, c.UID)
		if err != nil || g.Name != c.Name {
			t.Fatalf("GetByUID(%s) = %+v, %v", c.UID, g, err)
		}
	}
	// After a delete, the UID is free again and GetByUID no longer finds it.
	if err := s.Delete(ctx, a.Kind, a.Name, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetByUID(ctx, "AKIA-public-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetByUID after delete: %v", err)
	}
	mustCreate(t, s, b)
}

func testRequestID(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	first, err := s.Create(ctx, obj("clusters", "c1", "", "", "first"), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := s.Revision(ctx)
	// A retry with the same request id, even with other contents or another
	// name, returns the first result and writes nothing.
	again, err := s.Create(ctx, obj("clusters", "c2", "", "", "second"), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	sameObject(t, "retried Create", again, first)
	if _, err := s.Get(ctx, "clusters", "c2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("retried Create wrote c2: %v", err)
	}
	if r2, _ := s.Revision(ctx); r2 != rev {
		t.Fatalf("retried Create advanced the revision %d -> %d", rev, r2)
	}
	// It returns the object as it is now.
	u, err := s.Update(ctx, obj("clusters", "c1", "", "", "updated"), "")
	if err != nil {
		t.Fatal(err)
	}
	again, err = s.Create(ctx, obj("clusters", "c1", "", "", "first"), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	sameObject(t, "retried Create after Update", again, u)
	// Another kind with the same request id is independent.
	other, err := s.Create(ctx, obj("regions", "r1", "", "", "region"), "req-1")
	if err != nil {
		t.Fatal(err)
	}
	if other.Kind != "regions" || other.Name != "r1" {
		t.Fatalf("request id leaked across kinds: %+v", other)
	}
	// A failed Create does not record its request id.
	if _, err := s.Create(ctx, obj("clusters", "c1", "", "", "dup"), "req-2"); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("Create of a taken name: %v", err)
	}
	c3, err := s.Create(ctx, obj("clusters", "c3", "", "", "three"), "req-2")
	if err != nil || c3.Name != "c3" {
		t.Fatalf("Create after a failed attempt with the same request id: %+v, %v", c3, err)
	}
	// Deleted since: ErrNotFound, even if the name is taken again.
	if err := s.Delete(ctx, "clusters", "c1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, obj("clusters", "c1", "", "", "first"), "req-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("retried Create after Delete: %v, want ErrNotFound", err)
	}
	mustCreate(t, s, obj("clusters", "c1", "", "", "someone else's"))
	if _, err := s.Create(ctx, obj("clusters", "c1", "", "", "first"), "req-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("retried Create after Delete and re-create by another request: %v, want ErrNotFound", err)
	}
	// Inside a transaction that rolls back, the request id is not kept.
	boom := errors.New("boom")
	err = s.Tx(ctx, func(w store.Writer) error {
		if _, err := w.Create(ctx, obj("clusters", "c9", "", "", ""), "req-9"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx: %v", err)
	}
	c9, err := s.Create(ctx, obj("clusters", "c9b", "", "", ""), "req-9")
	if err != nil || c9.Name != "c9b" {
		t.Fatalf("request id of a rolled-back Create was kept: %+v, %v", c9, err)
	}
}

// walk lists every page of q and returns the objects in order.
func walk(t *testing.T, s store.Reader, q store.ListQuery) []store.Object {
	t.Helper()
	ctx := ctxT(t)
	var all []store.Object
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("pagination does not end")
		}
		objs, next, err := s.List(ctx, q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		all = append(all, objs...)
		if next == "" {
			return all
		}
		if len(objs) == 0 {
			t.Fatalf("List(%+v): empty page with a next token", q)
		}
		q.PageToken = next
	}
}

func names(objs []store.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Name
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testListFilters(t *testing.T, s store.Store) {
	var acmeProd, acme, globex, all []string
	for i := range 12 {
		org := "organizations/acme"
		if i%3 == 2 {
			org = "organizations/globex"
		}
		parent := org + "/projects/dev"
		if i%2 == 0 {
			parent = org + "/projects/prod"
		}
		name := fmt.Sprintf("%s/clusters/c%02d", parent, i)
		mustCreate(t, s, obj("clusters", name, parent, org, ""))
		all = append(all, name)
		switch org {
		case "organizations/acme":
			acme = append(acme, name)
			if parent == "organizations/acme/projects/prod" {
				acmeProd = append(acmeProd, name)
			}
		default:
			globex = append(globex, name)
		}
		// Noise in another kind with the same parent and org.
		mustCreate(t, s, obj("topics", name+"/t", parent, org, ""))
	}
	cases := []struct {
		q    store.ListQuery
		want []string
	}{
		{store.ListQuery{Kind: "clusters"}, all},
		{store.ListQuery{Kind: "clusters", Org: "organizations/acme"}, acme},
		{store.ListQuery{Kind: "clusters", Org: "organizations/globex"}, globex},
		{store.ListQuery{Kind: "clusters", Parent: "organizations/acme/projects/prod"}, acmeProd},
		{store.ListQuery{Kind: "clusters", Parent: "organizations/acme/projects/prod", Org: "organizations/acme"}, acmeProd},
		{store.ListQuery{Kind: "clusters", Parent: "organizations/acme/projects/prod", Org: "organizations/globex"}, nil},
		{store.ListQuery{Kind: "clusters", Org: "organizations/none"}, nil},
		{store.ListQuery{Kind: "nothing"}, nil},
	}
	for _, tc := range cases {
		for _, size := range []int{0, 1, 5} {
			q := tc.q
			q.PageSize = size
			got := names(walk(t, s, q))
			if !equalStrings(got, tc.want) {
				t.Errorf("List(%+v):\n got %v\nwant %v", q, got, tc.want)
			}
		}
	}
}

func testListPagination(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	var want []string
	for i := range 23 {
		o := mustCreate(t, s, obj("operations", fmt.Sprintf("operations/op%02d", i), "", "", strconv.Itoa(i)))
		want = append(want, o.Name)
	}
	objs, next, err := s.List(ctx, store.ListQuery{Kind: "operations", PageSize: 10})
	if err != nil || len(objs) != 10 || next == "" {
		t.Fatalf("first page: %d objects, next %q, %v", len(objs), next, err)
	}
	for i := 1; i < len(objs); i++ {
		if objs[i].Seq <= objs[i-1].Seq {
			t.Fatalf("page not in Seq order: %d then %d", objs[i-1].Seq, objs[i].Seq)
		}
	}
	// The page size may change between pages.
	objs2, next2, err := s.List(ctx, store.ListQuery{Kind: "operations", PageSize: 13, PageToken: next})
	if err != nil || len(objs2) != 13 || next2 != "" {
		t.Fatalf("second page: %d objects, next %q, %v", len(objs2), next2, err)
	}
	if got := names(append(objs, objs2...)); !equalStrings(got, want) {
		t.Fatalf("pages: %v, want %v", got, want)
	}
	// A page that ends exactly at the last object has no next token.
	objs, next, err = s.List(ctx, store.ListQuery{Kind: "operations", PageSize: 23})
	if err != nil || len(objs) != 23 || next != "" {
		t.Fatalf("exact page: %d objects, next %q, %v", len(objs), next, err)
	}
}

// testListWalkWhileWriting walks a collection page by page while another
// goroutine creates objects and the walker deletes objects it has not
// reached yet.
func testListWalkWhileWriting(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	const initial = 60
	var initialNames []string
	for i := range initial {
		o := mustCreate(t, s, obj("topics", fmt.Sprintf("t/old/%03d", i), "ns", "organizations/acme", ""))
		initialNames = append(initialNames, o.Name)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	created := make(chan string, 1000)
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(created)
		for i := 0; i < 1000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			o, err := s.Create(ctx, obj("topics", fmt.Sprintf("t/new/%03d", i), "ns", "organizations/acme", ""), "")
			if err != nil {
				errc <- err
				return
			}
			created <- o.Name
		}
	}()
	var stopOnce sync.Once
	halt := func() {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
	}
	defer halt()

	deleted := map[string]bool{}
	seen := map[string]int{}
	var lastSeq int64
	q := store.ListQuery{Kind: "topics", Parent: "ns", PageSize: 7}
	for page := 0; ; page++ {
		objs, next, err := s.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.Seq <= lastSeq {
				t.Fatalf("walk went back: seq %d after %d", o.Seq, lastSeq)
			}
			lastSeq = o.Seq
			seen[o.Name]++
			if deleted[o.Name] {
				t.Fatalf("walk returned %s after it was deleted", o.Name)
			}
		}
		// Delete two initial objects the walk has not reached yet.
		if page%2 == 0 {
			for _, name := range initialNames {
				if len(deleted) >= 10 {
					break
				}
				if seen[name] == 0 && !deleted[name] {
					if err := s.Delete(ctx, "topics", name, ""); err != nil {
						t.Fatal(err)
					}
					deleted[name] = true
					if len(deleted)%2 == 0 {
						break
					}
				}
			}
		}
		if next == "" {
			break
		}
		q.PageToken = next
	}
	halt()
	select {
	case err := <-errc:
		t.Fatalf("concurrent Create: %v", err)
	default:
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s visited %d times", name, n)
		}
	}
	for _, name := range initialNames {
		if !deleted[name] && seen[name] != 1 {
			t.Errorf("%s existed for the whole walk but was visited %d times", name, seen[name])
		}
	}
	if len(deleted) == 0 {
		t.Fatal("the walk deleted nothing; the test did not test deletes")
	}
	// Everything the creator made is there in a fresh walk, in order.
	all := walk(t, s, store.ListQuery{Kind: "topics", Parent: "ns", PageSize: 50})
	have := map[string]bool{}
	for _, o := range all {
		have[o.Name] = true
	}
	for name := range created {
		if !have[name] {
			t.Errorf("created %s missing from a later walk", name)
		}
	}
}

func testPageSize(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	if err := s.Tx(ctx, func(w store.Writer) error {
		for i := range 1003 {
			if _, err := w.Create(ctx, obj("events", fmt.Sprintf("e%04d", i), "", "", ""), ""); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ size, want int }{{0, 50}, {1, 1}, {50, 50}, {1000, 1000}, {1001, 1000}, {5000, 1000}} {
		objs, next, err := s.List(ctx, store.ListQuery{Kind: "events", PageSize: tc.size})
		if err != nil || len(objs) != tc.want || next == "" {
			t.Errorf("PageSize %d: %d objects, next %q, %v; want %d", tc.size, len(objs), next, err, tc.want)
		}
	}
	if _, _, err := s.List(ctx, store.ListQuery{Kind: "events", PageSize: -1}); err == nil {
		t.Error("negative page size accepted")
	} else if !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("negative page size: %v, want ErrInvalidArgument", err)
	}
	if _, _, err := s.ListAudit(ctx, store.AuditQuery{PageSize: -5}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("negative audit page size: %v, want ErrInvalidArgument", err)
	}
}

func testInvalidPageToken(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	for i := range 5 {
		mustCreate(t, s, obj("clusters", fmt.Sprintf("c%d", i), "p", "organizations/acme", ""))
	}
	_, next, err := s.List(ctx, store.ListQuery{Kind: "clusters", Parent: "p", PageSize: 2})
	if err != nil || next == "" {
		t.Fatalf("List: next %q, %v", next, err)
	}
	bad := []store.ListQuery{
		{Kind: "clusters", PageToken: "not a token"},
		{Kind: "clusters", PageToken: "AAAA"},
		{Kind: "clusters", Parent: "p", PageToken: next + "x"},
		// The same token with a different query.
		{Kind: "clusters", PageToken: next},
		{Kind: "clusters", Parent: "q", PageToken: next},
		{Kind: "clusters", Parent: "p", Org: "organizations/acme", PageToken: next},
		{Kind: "regions", Parent: "p", PageToken: next},
	}
	for _, q := range bad {
		if _, _, err := s.List(ctx, q); !errors.Is(err, store.ErrInvalidPageToken) {
			t.Errorf("List(%+v): %v, want ErrInvalidPageToken", q, err)
		}
	}
	if _, _, err := s.ListAudit(ctx, store.AuditQuery{PageToken: next}); !errors.Is(err, store.ErrInvalidPageToken) {
		t.Errorf("ListAudit with a List token: %v, want ErrInvalidPageToken", err)
	}
	// The right query with another page size is fine.
	if objs, _, err := s.List(ctx, store.ListQuery{Kind: "clusters", Parent: "p", PageSize: 10, PageToken: next}); err != nil || len(objs) != 3 {
		t.Errorf("List with the right query: %d, %v", len(objs), err)
	}
}

func testCount(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	for i := range 7 {
		org := "organizations/a"
		if i >= 4 {
			org = "organizations/b"
		}
		mustCreate(t, s, obj("clusters", fmt.Sprintf("c%d", i), org+"/p", org, ""))
	}
	mustCreate(t, s, obj("regions", "r", "", "", ""))
	for _, tc := range []struct {
		q    store.ListQuery
		want int
	}{
		{store.ListQuery{Kind: "clusters"}, 7},
		{store.ListQuery{Kind: "clusters", Org: "organizations/a"}, 4},
		{store.ListQuery{Kind: "clusters", Parent: "organizations/b/p"}, 3},
		{store.ListQuery{Kind: "clusters", Parent: "organizations/b/p", Org: "organizations/a"}, 0},
		{store.ListQuery{Kind: "regions"}, 1},
		{store.ListQuery{Kind: "nothing"}, 0},
	} {
		if n, err := s.Count(ctx, tc.q); err != nil || n != tc.want {
			t.Errorf("Count(%+v) = %d, %v; want %d", tc.q, n, err, tc.want)
		}
	}
	if err := s.Delete(ctx, "clusters", "c0", ""); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Count(ctx, store.ListQuery{Kind: "clusters", Org: "organizations/a"}); n != 3 {
		t.Errorf("Count after Delete = %d, want 3", n)
	}
}

func testChanges(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	if cs, err := s.Changes(ctx, 0, 100); err != nil || len(cs) != 0 {
		t.Fatalf("Changes of an empty store: %v, %v", cs, err)
	}
	a := mustCreate(t, s, obj("clusters", "a", "", "organizations/acme", "a1"))
	r := mustCreate(t, s, obj("regions", "r", "", "", "r1"))
	a2, err := s.Update(ctx, obj("clusters", "a", "", "", "a2"), "")
	if err != nil {
		t.Fatal(err)
	}
	b := mustCreate(t, s, obj("clusters", "b", "", "", "b1"))
	if err := s.Delete(ctx, "clusters", "a", ""); err != nil {
		t.Fatal(err)
	}
	// Failed writes leave no trace.
	_, _ = s.Create(ctx, obj("clusters", "b", "", "", "dup"), "")
	_ = s.Delete(ctx, "clusters", "b", `"stale"`)

	cs, err := s.Changes(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 5 {
		t.Fatalf("%d changes, want 5: %+v", len(cs), cs)
	}
	for i, c := range cs {
		if c.Revision != cs[0].Revision+int64(i) {
			t.Fatalf("revisions not gap-free: %d at %d", c.Revision, i)
		}
		if c.Object.Revision != c.Revision || c.Kind != c.Object.Kind || c.Name != c.Object.Name {
			t.Fatalf("change %d inconsistent: %+v", i, c)
		}
	}
	sameObject(t, "change 0", cs[0].Object, a)
	sameObject(t, "change 1", cs[1].Object, r)
	sameObject(t, "change 2", cs[2].Object, a2)
	sameObject(t, "change 3", cs[3].Object, b)
	del := cs[4]
	if !del.Deleted || del.Kind != "clusters" || del.Name != "a" || string(del.Object.Data) != "a2" ||
		del.Object.UID != a.UID || del.Object.Org != "organizations/acme" || del.Revision <= b.Revision {
		t.Fatalf("delete change: %+v", del)
	}
	for _, c := range cs[:4] {
		if c.Deleted {
			t.Fatalf("non-delete marked deleted: %+v", c)
		}
	}
	rev, err := s.Revision(ctx)
	if err != nil || rev != del.Revision {
		t.Fatalf("Revision %d, %v; want %d", rev, err, del.Revision)
	}

	// after and limit.
	got, err := s.Changes(ctx, cs[1].Revision, 2)
	if err != nil || len(got) != 2 || got[0].Revision != cs[2].Revision || got[1].Revision != cs[3].Revision {
		t.Fatalf("Changes(after %d, 2) = %+v, %v", cs[1].Revision, got, err)
	}
	if got, err := s.Changes(ctx, rev, 10); err != nil || len(got) != 0 {
		t.Fatalf("Changes after the newest: %+v, %v", got, err)
	}
	// Kinds filter.
	got, err = s.Changes(ctx, 0, 100, "regions")
	if err != nil || len(got) != 1 || got[0].Name != "r" {
		t.Fatalf("Changes(regions) = %+v, %v", got, err)
	}
	got, err = s.Changes(ctx, 0, 100, "clusters", "regions")
	if err != nil || len(got) != 5 {
		t.Fatalf("Changes(clusters, regions) = %d, %v", len(got), err)
	}
	got, err = s.Changes(ctx, cs[0].Revision, 2, "clusters")
	if err != nil || len(got) != 2 || got[0].Revision != cs[2].Revision || got[1].Revision != cs[3].Revision {
		t.Fatalf("Changes(after, 2, clusters) = %+v, %v", got, err)
	}
	if got, err := s.Changes(ctx, 0, 100, "nothing"); err != nil || len(got) != 0 {
		t.Fatalf("Changes(nothing) = %+v, %v", got, err)
	}

	// A follower that reads in small batches sees every revision once, in
	// order, with no gaps, while writes continue.
	for i := range 30 {
		mustCreate(t, s, obj("topics", fmt.Sprintf("t%d", i), "", "", ""))
	}
	var after int64
	var n int
	for {
		batch, err := s.Changes(ctx, after, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			break
		}
		for _, c := range batch {
			if c.Revision != after+1 {
				t.Fatalf("follower: revision %d after %d", c.Revision, after)
			}
			after = c.Revision
			n++
		}
	}
	if n != 35 {
		t.Fatalf("follower saw %d changes, want 35", n)
	}
}

func testRevision(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	rev, err := s.Revision(ctx)
	if err != nil || rev != 0 {
		t.Fatalf("Revision of an empty store: %d, %v", rev, err)
	}
	c := mustCreate(t, s, obj("clusters", "c", "", "", ""))
	if rev, _ = s.Revision(ctx); rev != c.Revision || rev != 1 {
		t.Fatalf("Revision after Create %d, object %d", rev, c.Revision)
	}
	u, _ := s.Update(ctx, obj("clusters", "c", "", "", "x"), "")
	if rev, _ = s.Revision(ctx); rev != u.Revision || rev != 2 {
		t.Fatalf("Revision after Update %d, object %d", rev, u.Revision)
	}
	if err := s.AppendAudit(ctx, store.AuditEvent{Org: "o", Method: "M"}); err != nil {
		t.Fatal(err)
	}
	if rev, _ = s.Revision(ctx); rev != 2 {
		t.Fatalf("audit advanced the revision to %d", rev)
	}
	_ = s.Delete(ctx, "clusters", "c", "")
	if rev, _ = s.Revision(ctx); rev != 3 {
		t.Fatalf("Revision after Delete %d", rev)
	}
	// Seq is not the revision: an update does not move an object in lists.
	c2 := mustCreate(t, s, obj("clusters", "c2", "", "", ""))
	if c2.Seq <= c.Seq {
		t.Fatalf("Seq %d after %d", c2.Seq, c.Seq)
	}
}

func testAudit(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	at := time.Date(2026, 5, 1, 12, 30, 45, 123456789, time.FixedZone("X", 3600))
	var want []store.AuditEvent
	for i := range 12 {
		ev := store.AuditEvent{
			Org:       "organizations/acme",
			Principal: "organizations/acme/users/ann",
			Method:    "CreateCluster",
			Resource:  fmt.Sprintf("organizations/acme/clusters/c%d", i),
			RequestID: fmt.Sprintf("r%d", i),
			Outcome:   "ok",
			Detail:    []byte(fmt.Sprintf(`{"i":%d}`, i)),
		}
		if i == 3 {
			ev.Time = at
			ev.Detail = nil
		}
		if err := s.AppendAudit(ctx, ev); err != nil {
			t.Fatal(err)
		}
		want = append(want, ev)
		if err := s.AppendAudit(ctx, store.AuditEvent{Org: "organizations/globex", Method: "DeleteCluster", Outcome: "denied"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendAudit(ctx, store.AuditEvent{Principal: "operators/root", Method: "CreateRegion", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	var got []store.AuditEvent
	q := store.AuditQuery{Org: "organizations/acme", PageSize: 5}
	for pages := 0; ; pages++ {
		evs, next, err := s.ListAudit(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 5 {
			t.Fatalf("page of %d", len(evs))
		}
		got = append(got, evs...)
		if next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("audit pagination does not end")
		}
		q.PageToken = next
	}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i, ev := range got {
		w := want[i]
		if ev.Org != w.Org || ev.Principal != w.Principal || ev.Method != w.Method || ev.Resource != w.Resource ||
			ev.RequestID != w.RequestID || ev.Outcome != w.Outcome || !bytes.Equal(ev.Detail, w.Detail) {
			t.Fatalf("event %d: %+v, want %+v", i, ev, w)
		}
		if i > 0 && ev.Seq <= got[i-1].Seq {
			t.Fatalf("events out of order: %d after %d", ev.Seq, got[i-1].Seq)
		}
		if ev.Time.IsZero() || ev.Time.Location() != time.UTC {
			t.Fatalf("event %d time %v", i, ev.Time)
		}
	}
	if wantAt := at.UTC().Truncate(time.Microsecond); !got[3].Time.Equal(wantAt) {
		t.Fatalf("given time %v came back as %v", wantAt, got[3].Time)
	}
	ops, _, err := s.ListAudit(ctx, store.AuditQuery{})
	if err != nil || len(ops) != 1 || ops[0].Method != "CreateRegion" {
		t.Fatalf("operator-level audit: %+v, %v", ops, err)
	}
	gl, _, err := s.ListAudit(ctx, store.AuditQuery{Org: "organizations/globex", PageSize: 1000})
	if err != nil || len(gl) != 12 {
		t.Fatalf("globex audit: %d, %v", len(gl), err)
	}
}

func testTxCommit(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	before, _ := s.Revision(ctx)
	err := s.Tx(ctx, func(w store.Writer) error {
		a, err := w.Create(ctx, obj("clusters", "a", "", "", "1"), "req-a")
		if err != nil {
			return err
		}
		// Reads inside the transaction see its writes.
		if g, err := w.Get(ctx, "clusters", "a"); err != nil || g.Etag != a.Etag {
			return fmt.Errorf("read own write: %+v, %v", g, err)
		}
		if n, err := w.Count(ctx, store.ListQuery{Kind: "clusters"}); err != nil || n != 1 {
			return fmt.Errorf("count own write: %d, %v", n, err)
		}
		if _, err := w.Update(ctx, obj("clusters", "a", "", "", "2"), a.Etag); err != nil {
			return err
		}
		if _, err := w.Create(ctx, obj("clusters", "b", "", "", "1"), ""); err != nil {
			return err
		}
		return w.AppendAudit(ctx, store.AuditEvent{Org: "o", Method: "Tx", Outcome: "ok"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if g, err := s.Get(ctx, "clusters", "a"); err != nil || string(g.Data) != "2" {
		t.Fatalf("after commit: %+v, %v", g, err)
	}
	if after, _ := s.Revision(ctx); after != before+3 {
		t.Fatalf("revision %d -> %d, want +3", before, after)
	}
	if evs, _, _ := s.ListAudit(ctx, store.AuditQuery{Org: "o"}); len(evs) != 1 {
		t.Fatalf("audit after commit: %d", len(evs))
	}
	if cs, _ := s.Changes(ctx, before, 10); len(cs) != 3 {
		t.Fatalf("changes after commit: %d", len(cs))
	}
}

func testTxRollback(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	keep := mustCreate(t, s, obj("clusters", "keep", "", "", "v1"))
	before, _ := s.Revision(ctx)
	boom := errors.New("boom")
	var leaked store.Writer
	err := s.Tx(ctx, func(w store.Writer) error {
		leaked = w
		if _, err := w.Create(ctx, obj("clusters", "new", "", "", ""), "req"); err != nil {
			return err
		}
		if _, err := w.Update(ctx, obj("clusters", "keep", "", "", "v2"), ""); err != nil {
			return err
		}
		if err := w.AppendAudit(ctx, store.AuditEvent{Org: "o", Method: "M"}); err != nil {
			return err
		}
		return fmt.Errorf("wrapped: %w", boom)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx returned %v, want fn's error", err)
	}
	if _, err := s.Get(ctx, "clusters", "new"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rolled-back Create is visible: %v", err)
	}
	g, err := s.Get(ctx, "clusters", "keep")
	if err != nil {
		t.Fatal(err)
	}
	sameObject(t, "after rollback", g, keep)
	if after, _ := s.Revision(ctx); after != before {
		t.Fatalf("rollback moved the revision %d -> %d", before, after)
	}
	if cs, _ := s.Changes(ctx, before, 10); len(cs) != 0 {
		t.Fatalf("rollback left changes: %+v", cs)
	}
	if evs, _, _ := s.ListAudit(ctx, store.AuditQuery{Org: "o"}); len(evs) != 0 {
		t.Fatalf("rollback left audit events: %+v", evs)
	}
	// The writer is dead after Tx returns.
	if _, err := leaked.Create(ctx, obj("clusters", "late", "", "", ""), ""); err == nil {
		t.Fatal("writer usable after its transaction")
	}
	if _, err := leaked.Get(ctx, "clusters", "keep"); err == nil {
		t.Fatal("writer readable after its transaction")
	}
	// A store error inside fn also rolls back everything before it.
	err = s.Tx(ctx, func(w store.Writer) error {
		if _, err := w.Create(ctx, obj("clusters", "x", "", "", ""), ""); err != nil {
			return err
		}
		_, err := w.Create(ctx, obj("clusters", "keep", "", "", ""), "")
		return err
	})
	if !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("Tx: %v, want ErrAlreadyExists", err)
	}
	if _, err := s.Get(ctx, "clusters", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("partially failed Tx left x: %v", err)
	}
}

// testTxPanic: a panic in fn propagates, rolls the transaction back and
// leaves the store usable.
func testTxPanic(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic of fn", r)
			}
		}()
		_ = s.Tx(ctx, func(w store.Writer) error {
			if _, err := w.Create(ctx, obj("clusters", "p", "", "", ""), ""); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if _, err := s.Get(ctx, "clusters", "p"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("object of a panicked Tx: %v", err)
	}
	mustCreate(t, s, obj("clusters", "after", "", "", ""))
	if rev, err := s.Revision(ctx); err != nil || rev != 1 {
		t.Fatalf("Revision %d, %v; want 1", rev, err)
	}
}

// testConcurrentIncrements: several goroutines increment one counter, half
// read-modify-write inside Tx, half with Get + Update(etag) and a retry on
// ErrEtagMismatch. The final value must equal the number of successful
// updates: no update is lost.
func testConcurrentIncrements(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	mustCreate(t, s, obj("counters", "n", "", "", "0"))
	const workers, each = 4, 8
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		successes int
		mismatch  int
		errs      []error
	)
	incr := func(o store.Object) store.Object {
		n, _ := strconv.Atoi(string(o.Data))
		o.Data = []byte(strconv.Itoa(n + 1))
		return o
	}
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				var err error
				for {
					if g%2 == 0 {
						err = s.Tx(ctx, func(w store.Writer) error {
							cur, err := w.Get(ctx, "counters", "n")
							if err != nil {
								return err
							}
							_, err = w.Update(ctx, incr(cur), cur.Etag)
							return err
						})
					} else {
						var cur store.Object
						cur, err = s.Get(ctx, "counters", "n")
						if err == nil {
							_, err = s.Update(ctx, incr(cur), cur.Etag)
						}
					}
					if !errors.Is(err, store.ErrEtagMismatch) {
						break
					}
					mu.Lock()
					mismatch++
					mu.Unlock()
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					successes++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("increment: %v", err)
	}
	final, err := s.Get(ctx, "counters", "n")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(final.Data); got != strconv.Itoa(successes) || successes != workers*each {
		t.Fatalf("counter %s after %d successful increments (want %d)", got, successes, workers*each)
	}
	cs, err := s.Changes(ctx, 0, 1000, "counters")
	if err != nil || len(cs) != 1+successes {
		t.Fatalf("%d changes for %d writes, %v", len(cs), 1+successes, err)
	}
	t.Logf("%d increments, %d etag mismatches retried", successes, mismatch)
}

func testTimes(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	lo := time.Now().Add(-time.Minute)
	c := mustCreate(t, s, obj("clusters", "c", "", "", ""))
	hi := time.Now().Add(time.Minute)
	if c.CreateTime.Before(lo) || c.CreateTime.After(hi) {
		t.Fatalf("CreateTime %v is not now", c.CreateTime)
	}
	if c.CreateTime.Location() != time.UTC || c.CreateTime.Nanosecond()%1000 != 0 {
		t.Fatalf("CreateTime %v: want UTC, microseconds", c.CreateTime)
	}
	g, _ := s.Get(ctx, "clusters", "c")
	if g.CreateTime != c.CreateTime || g.UpdateTime != c.UpdateTime {
		t.Fatalf("times changed on the way through the database: %v/%v vs %v/%v", g.CreateTime, g.UpdateTime, c.CreateTime, c.UpdateTime)
	}
}

func testClosed(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	mustCreate(t, s, obj("clusters", "c", "", "", ""))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "clusters", "c"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if _, err := s.Create(ctx, obj("clusters", "d", "", "", ""), ""); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Create after Close: %v", err)
	}
	if err := s.Tx(ctx, func(store.Writer) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Tx after Close: %v", err)
	}
	_ = s.Close() // a second Close is harmless
}

func testPersistence(t *testing.T, open Reopener) {
	ctx := ctxT(t)
	s := open(t)
	a := mustCreate(t, s, obj("clusters", "a", "p", "organizations/acme", "a"))
	b, err := s.Create(ctx, obj("clusters", "b", "p", "organizations/acme", "b"), "req-b")
	if err != nil {
		t.Fatal(err)
	}
	b, err = s.Update(ctx, obj("clusters", "b", "", "", "b2"), b.Etag)
	if err != nil {
		t.Fatal(err)
	}
	d := mustCreate(t, s, obj("clusters", "d", "p", "organizations/acme", "d"))
	if err := s.Delete(ctx, "clusters", "d", d.Etag); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, store.AuditEvent{Org: "organizations/acme", Method: "M", Outcome: "ok", Detail: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	_, token, err := s.List(ctx, store.ListQuery{Kind: "clusters", Parent: "p", PageSize: 1})
	if err != nil || token == "" {
		t.Fatalf("List: %q, %v", token, err)
	}
	rev, _ := s.Revision(ctx)
	changes, _ := s.Changes(ctx, 0, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t)
	defer s.Close()
	if g, err := s.Get(ctx, "clusters", "a"); err != nil {
		t.Fatal(err)
	} else {
		sameObject(t, "a after re-open", g, a)
	}
	if g, err := s.GetByUID(ctx, b.UID); err != nil {
		t.Fatal(err)
	} else {
		sameObject(t, "b after re-open", g, b)
	}
	if _, err := s.Get(ctx, "clusters", "d"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted object came back: %v", err)
	}
	if r, _ := s.Revision(ctx); r != rev {
		t.Fatalf("revision %d after re-open, want %d", r, rev)
	}
	if cs, _ := s.Changes(ctx, 0, 100); len(cs) != len(changes) {
		t.Fatalf("%d changes after re-open, want %d", len(cs), len(changes))
	}
	// The request id survived.
	if again, err := s.Create(ctx, obj("clusters", "zzz", "p", "", ""), "req-b"); err != nil || again.Name != "b" {
		t.Fatalf("request id after re-open: %+v, %v", again, err)
	}
	// Page tokens survive a restart.
	objs, next, err := s.List(ctx, store.ListQuery{Kind: "clusters", Parent: "p", PageSize: 1, PageToken: token})
	if err != nil || len(objs) != 1 || objs[0].Name != "b" || next != "" {
		t.Fatalf("List with a token from before re-open: %v %q %v", names(objs), next, err)
	}
	if evs, _, err := s.ListAudit(ctx, store.AuditQuery{Org: "organizations/acme"}); err != nil || len(evs) != 1 {
		t.Fatalf("audit after re-open: %+v, %v", evs, err)
	}
	// Counters continue: new writes get new revisions, seqs and etags.
	c := mustCreate(t, s, obj("clusters", "c", "p", "", ""))
	if c.Revision != rev+1 || c.Seq <= b.Seq {
		t.Fatalf("after re-open: revision %d (want %d), seq %d (after %d)", c.Revision, rev+1, c.Seq, b.Seq)
	}
}

func testReopenIdempotent(t *testing.T, open Reopener) {
	ctx := ctxT(t)
	s := open(t)
	mustCreate(t, s, obj("clusters", "a", "", "", "a"))
	rev, _ := s.Revision(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s = open(t)
		if r, err := s.Revision(ctx); err != nil || r != rev {
			t.Fatalf("re-open %d: revision %d, %v; want %d", i, r, err, rev)
		}
		if n, err := s.Count(ctx, store.ListQuery{Kind: "clusters"}); err != nil || n != 1 {
			t.Fatalf("re-open %d: count %d, %v", i, n, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
