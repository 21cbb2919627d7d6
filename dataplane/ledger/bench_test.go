package ledger

import (
	"context"
	"testing"
)

// BenchmarkAddEntry appends 1 KiB entries, pipelined (at most 1000 in
// flight), to a managed ledger on one in-process memstorage bookie.
func BenchmarkAddEntry(b *testing.B) {
	c := newCluster(b, clusterOpts{})
	f := c.newFactory(Config{})
	ml, err := f.Open(context.Background(), "bench/ns/persistent/add", nil)
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1024)
	sem := make(chan struct{}, 1000)
	errs := make(chan error, 1)
	cb := func(_ Position, err error) {
		if err != nil {
			select {
			case errs <- err:
			default:
			}
		}
		<-sem
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sem <- struct{}{}
		ml.AddEntry(data, cb)
	}
	for i := 0; i < cap(sem); i++ {
		sem <- struct{}{}
	}
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	if err := ml.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}
