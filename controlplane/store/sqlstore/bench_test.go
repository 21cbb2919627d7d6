package sqlstore_test

import (
	"fmt"
	"testing"

	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/controlplane/store/pgtest"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
)

const benchObjects = 1000

// benchBackends: each opens a fresh store holding benchObjects clusters
// under one parent. PostgreSQL is skipped when it is not installed.
var benchBackends = []struct {
	name string
	dsn  func(b *testing.B) string
}{
	{"sqlite-memory", func(*testing.B) string { return "sqlite::memory:" }},
	{"sqlite-file", func(b *testing.B) string { return fileDSN(b) }},
	{"postgres", func(b *testing.B) string { return pgtest.DSN(b) }},
}

func benchStore(b *testing.B, dsn string) *sqlstore.Store {
	s := open(b, dsn)
	b.Cleanup(func() { s.Close() })
	ctx := ctxT(b)
	data := []byte(`{"name":"organizations/acme/clusters/prod","region":"eu-west-1","size":{"brokers":3,"bookies":3}}`)
	if err := s.Tx(ctx, func(w store.Writer) error {
		for i := range benchObjects {
			o := store.Object{Kind: "clusters", Name: fmt.Sprintf("organizations/acme/clusters/c%04d", i),
				Parent: "organizations/acme", Org: "organizations/acme", Data: data}
			if _, err := w.Create(ctx, o, ""); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkGet(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) {
			s := benchStore(b, be.dsn(b))
			ctx := ctxT(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := s.Get(ctx, "clusters", fmt.Sprintf("organizations/acme/clusters/c%04d", i%benchObjects)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkList50(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) {
			s := benchStore(b, be.dsn(b))
			ctx := ctxT(b)
			q := store.ListQuery{Kind: "clusters", Parent: "organizations/acme", PageSize: 50}
			b.ReportAllocs()
			for b.Loop() {
				objs, next, err := s.List(ctx, q)
				if err != nil || len(objs) != 50 {
					b.Fatalf("%d objects, %v", len(objs), err)
				}
				q.PageToken = next // walk the collection, then start over
			}
		})
	}
}

func BenchmarkCreate(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) {
			s := benchStore(b, be.dsn(b))
			ctx := ctxT(b)
			data := []byte(`{"name":"x","size":3}`)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				o := store.Object{Kind: "topics", Name: fmt.Sprintf("organizations/acme/topics/t%d", i),
					Parent: "organizations/acme", Org: "organizations/acme", Data: data}
				if _, err := s.Create(ctx, o, ""); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
