package bookie

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// TestMetrics: the server's and the disk storage's series count what
// happened: adds and reads by result, journal groups, flushes, ledgers.
func TestMetrics(t *testing.T) {
	st, err := storage.Open(storage.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := startServer(t, Config{}, st, nil)
	reg := prometheus.NewPedanticRegistry()
	if err := s.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	c := dial(t, s)
	ctx := context.Background()
	const n = 30
	for e := range int64(n) {
		if err := add(c, addReq(7, e, e-1, "metrics", false)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Fence(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if err := add(c, addReq(7, n, n-1, "late", false)); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("add after fence: %v", err)
	}
	for e := range int64(5) {
		if _, err := c.Read(ctx, 7, e, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Read(ctx, 7, 999, 0); err == nil {
		t.Fatal("read of a missing entry succeeded")
	}
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}

	value := func(c prometheus.Counter) float64 {
		var m dto.Metric
		if err := c.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	counter := func(op, result string) float64 { return value(s.metrics.requests.WithLabelValues(op, result)) }
	if got := counter("add", "ok"); got != n {
		t.Errorf("adds ok = %v, want %d", got, n)
	}
	if got := counter("add", "error"); got != 1 {
		t.Errorf("adds refused = %v, want 1", got)
	}
	if got, want := counter("read", "ok"), 5.0; got != want {
		t.Errorf("reads ok = %v, want %v", got, want)
	}
	if got := counter("read", "error"); got != 1 {
		t.Errorf("reads failed = %v, want 1", got)
	}
	if got, want := value(s.metrics.addBytes), float64(n*len("metrics")); got != want {
		t.Errorf("add bytes = %v, want %v", got, want)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		switch {
		case m.GetHistogram() != nil:
			byName[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
		case m.GetGauge() != nil:
			byName[mf.GetName()] = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			byName[mf.GetName()] = m.GetCounter().GetValue()
		}
	}
	for name, min := range map[string]float64{
		"magnetar_bookie_add_seconds":          n,
		"magnetar_bookie_read_seconds":         5,
		"magnetar_bookie_journal_sync_seconds": 1, // at least one group (the adds were sequential: about one each)
		"magnetar_bookie_journal_group_bytes":  1,
		"magnetar_bookie_flush_seconds":        1,
		"magnetar_bookie_flush_bytes_total":    float64(n * len("metrics")),
		"magnetar_bookie_ledgers":              1,
		"magnetar_bookie_connections":          1,
		"magnetar_bookie_journal_files":        1,
	} {
		if got, ok := byName[name]; !ok || got < min {
			t.Errorf("%s = %v (present %v), want >= %v", name, got, ok, min)
		}
	}
	if got := byName["magnetar_bookie_read_only"]; got != 0 {
		t.Errorf("read_only = %v", got)
	}
}
