package etcdstore_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  etcdstore.Config
		ok   bool
	}{
		{"minimal", etcdstore.Config{Endpoints: []string{"http://127.0.0.1:1"}}, true},
		{"prefix", etcdstore.Config{Endpoints: []string{"x"}, Prefix: "/a/b"}, true},
		{"no endpoints", etcdstore.Config{}, false},
		{"prefix without slash", etcdstore.Config{Endpoints: []string{"x"}, Prefix: "a"}, false},
		{"prefix with trailing slash", etcdstore.Config{Endpoints: []string{"x"}, Prefix: "/a/"}, false},
		{"negative page", etcdstore.Config{Endpoints: []string{"x"}, PageSize: -1}, false},
		{"https", etcdstore.Config{Endpoints: []string{"https://a:1", "https://b:1"}, TLS: &tls.Config{}}, true},
		{"https, system roots", etcdstore.Config{Endpoints: []string{"https://a:1"}}, true},
		{"mixed schemes", etcdstore.Config{Endpoints: []string{"https://a:1", "http://b:1"}}, false},
		{"TLS with http", etcdstore.Config{Endpoints: []string{"http://a:1"}, TLS: &tls.Config{}}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok || (err != nil && !errors.Is(err, etcdstore.ErrBadConfig)) {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  etcdstore.EmbeddedConfig
		ok   bool
	}{
		{"minimal", etcdstore.EmbeddedConfig{Dir: "d"}, true},
		{"cluster", etcdstore.EmbeddedConfig{Dir: "d", Name: "n2", InitialCluster: "n1=http://a:1,n2=http://b:2", ClusterState: "existing"}, true},
		{"no dir", etcdstore.EmbeddedConfig{}, false},
		{"bad state", etcdstore.EmbeddedConfig{Dir: "d", ClusterState: "old"}, false},
		{"not a member", etcdstore.EmbeddedConfig{Dir: "d", Name: "n3", InitialCluster: "n1=http://a:1"}, false},
		{"bad member", etcdstore.EmbeddedConfig{Dir: "d", InitialCluster: "magnetar"}, false},
		{"fast election", etcdstore.EmbeddedConfig{Dir: "d", HeartbeatInterval: time.Second, ElectionTimeout: time.Second}, false},
		{"client TLS", etcdstore.EmbeddedConfig{Dir: "d", ClientTLS: etcdstore.ServerTLS{CertFile: "c", KeyFile: "k", TrustFile: "t", ClientCertAuth: true}}, true},
		{"client TLS on http", etcdstore.EmbeddedConfig{Dir: "d", ClientURL: "http://a:1", ClientTLS: etcdstore.ServerTLS{CertFile: "c", KeyFile: "k"}}, false},
		{"https without TLS", etcdstore.EmbeddedConfig{Dir: "d", PeerURL: "https://a:1"}, false},
		{"TLS without key", etcdstore.EmbeddedConfig{Dir: "d", PeerTLS: etcdstore.ServerTLS{CertFile: "c"}}, false},
		{"client auth without trust", etcdstore.EmbeddedConfig{Dir: "d", ClientTLS: etcdstore.ServerTLS{CertFile: "c", KeyFile: "k", ClientCertAuth: true}}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok || (err != nil && !errors.Is(err, etcdstore.ErrBadConfig)) {
			t.Errorf("%s: Validate = %v", tc.name, err)
		}
	}
}

// TestPrefixIsolation: stores with prefixes "/t1" and "/t10" on one etcd see
// only their own keys, events and sequences.
func TestPrefixIsolation(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	open := func(prefix string) *etcdstore.Store {
		s, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: srv.ClientURLs(), Prefix: prefix, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open("/t1"), open("/t10")
	wa, err := a.Watch(ctx, "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	if _, err := b.Put(ctx, "/x", []byte("b"), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := b.NextID(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, "/y", []byte("a"), metadata.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, "/x"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("a sees b's key: %v", err)
	}
	if c, err := a.Children(ctx, "/"); err != nil || !slices.Equal(c, []string{"y"}) {
		t.Fatalf("a.Children(/) = %q, %v", c, err)
	}
	if id, err := a.NextID(ctx, "s"); err != nil || id != 1 {
		t.Fatalf("a.NextID = %d, %v; want 1", id, err)
	}
	select {
	case ev := <-wa.Events():
		if ev.Key != "/y" {
			t.Fatalf("a's watch got %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("timeout")
	}
}

// TestChildrenLarge lists a parent with 20,000 descendants: half are direct
// children, the rest sit in the subtrees of a few children.
func TestChildrenLarge(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	s, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: srv.ClientURLs(), Prefix: "/big", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var keys, want []string
	for i := range 10000 {
		name := fmt.Sprintf("c%05d", i)
		keys = append(keys, "/p/"+name)
		want = append(want, name)
	}
	for i := range 10000 {
		keys = append(keys, fmt.Sprintf("/p/c%05d/g%05d", (i%4)*2500, i))
	}
	var ops []clientv3.Op
	flush := func() {
		if _, err := s.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[:0]
	}
	for _, k := range keys {
		if ops = append(ops, clientv3.OpPut("/big"+k, "")); len(ops) == 128 {
			flush()
		}
	}
	flush()
	got, err := s.Children(ctx, "/p")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Children(/p): %d names, want %d", len(got), len(want))
	}
	if got, err := s.Children(ctx, "/p/c02500"); err != nil || len(got) != 2500 {
		t.Fatalf("Children(/p/c02500): %d names, %v", len(got), err)
	}
}
