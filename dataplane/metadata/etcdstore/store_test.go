package etcdstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/metadatatest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testConfig is a single member tuned to start fast: no fsync, short raft
// timings (a lone member has no peers to time out).
func testConfig(t *testing.T) etcdstore.EmbeddedConfig {
	return etcdstore.EmbeddedConfig{
		Dir:               t.TempDir(),
		UnsafeNoFsync:     true,
		HeartbeatInterval: 10 * time.Millisecond,
		ElectionTimeout:   100 * time.Millisecond,
		Logger:            zap.NewNop(),
	}
}

// startServer starts a single-member etcd for one test.
func startServer(t *testing.T) *etcdstore.Server {
	t.Helper()
	srv, err := etcdstore.StartServer(testCtx(t), testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// adminClient is a client separate from the stores under test, used to
// revoke their leases and compact.
func adminClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// revoker returns an ExpireSession that revokes the session's lease from
// another client, as an expired lease would be.
func revoker(cli func(metadata.Store) *clientv3.Client) func(*testing.T, metadata.Store, metadata.Session) {
	return func(t *testing.T, s metadata.Store, sess metadata.Session) {
		t.Helper()
		if _, err := cli(s).Revoke(testCtx(t), clientv3.LeaseID(sess.ID())); err != nil {
			t.Fatalf("revoke lease %x: %v", sess.ID(), err)
		}
	}
}

func compactor(cli func(metadata.Store) *clientv3.Client) func(*testing.T, metadata.Store, int64) {
	return func(t *testing.T, s metadata.Store, rev int64) {
		t.Helper()
		if _, err := cli(s).Compact(testCtx(t), rev, clientv3.WithCompactPhysical()); err != nil {
			t.Fatalf("compact at %d: %v", rev, err)
		}
	}
}

// TestEmbeddedConformance runs the suite on a fresh embedded member per
// test, the way a standalone process uses it.
func TestEmbeddedConformance(t *testing.T) {
	admins := map[metadata.Store]*clientv3.Client{}
	admin := func(s metadata.Store) *clientv3.Client { return admins[s] }
	metadatatest.Run(t, metadatatest.Harness{
		New: func(t *testing.T) metadata.Store {
			e, err := etcdstore.StartEmbedded(testCtx(t), testConfig(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := e.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			admins[e] = adminClient(t, e.ClientURLs())
			return e
		},
		ExpireSession: revoker(admin),
		Compact:       compactor(admin),
		// No Restart: the embedded Store calls the member in process and is
		// bound to one run of it (TestExternalConformance restarts a member
		// under a networked Store).
	})
}

var prefixSeq atomic.Int64

// TestExternalConformance runs the suite through etcdstore.New against a
// member that only this test's harness controls, as against a separate
// cluster. Stores share the member and are isolated by key prefixes.
func TestExternalConformance(t *testing.T) {
	srv := startServer(t)
	admin := adminClient(t, srv.ClientURLs())
	cli := func(metadata.Store) *clientv3.Client { return admin }
	metadatatest.Run(t, metadatatest.Harness{
		New: func(t *testing.T) metadata.Store {
			s, err := etcdstore.New(testCtx(t), etcdstore.Config{
				Endpoints: srv.ClientURLs(),
				Prefix:    fmt.Sprintf("/test/%d", prefixSeq.Add(1)),
				PageSize:  7, // exercise paging in Children
				Logger:    zap.NewNop(),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			return s
		},
		ExpireSession: revoker(cli),
		Compact:       compactor(cli),
		Restart: func(t *testing.T, s metadata.Store) {
			if err := srv.Restart(testCtx(t)); err != nil {
				t.Fatalf("restart: %v", err)
			}
		},
	})
}
