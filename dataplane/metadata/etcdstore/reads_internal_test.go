package etcdstore

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// TestReadsSerializableWhileAlone: the embedded store reads without a
// consensus round while its member is alone, and linearizably once the
// cluster has another member (here a learner that never starts); reads
// and writes work both ways.
func TestReadsSerializableWhileAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, EmbeddedConfig{Dir: t.TempDir(), UnsafeNoFsync: true,
		HeartbeatInterval: 10 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := e.Store.reads(); len(got) != 1 {
		t.Fatalf("lone member: read options %v, want serializable", got)
	}
	if _, err := e.Store.Put(ctx, "/k", []byte("1"), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if kv, err := e.Store.Get(ctx, "/k"); err != nil || string(kv.Value) != "1" {
		t.Fatalf("read after write = %q, %v", kv.Value, err)
	}
	if _, err := e.Store.cli.MemberAddAsLearner(ctx, []string{"http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(e.Store.reads()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a second member joined, but reads stay serializable")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.Store.Put(ctx, "/k", []byte("2"), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if kv, err := e.Store.Get(ctx, "/k"); err != nil || string(kv.Value) != "2" {
		t.Fatalf("linearizable read after write = %q, %v", kv.Value, err)
	}
}
