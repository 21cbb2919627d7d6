package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/metadatatest"
	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// member is one `magnetar metadata` process.
type member struct {
	name      string
	clientURL string
	cmd       *exec.Cmd
	log       string
	exited    chan struct{}
}

// goTool returns the go command that runs this test.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); runtime.GOROOT() != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// buildMagnetar builds the magnetar binary into a temporary directory.
func buildMagnetar(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "magnetar")
	cmd := exec.Command(goTool(), "build", "-o", bin, "github.com/magnetar-dev/magnetar/cmd/magnetar")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build magnetar: %v\n%s", err, out)
	}
	return bin
}

// startMembers starts n members of a new cluster as separate processes.
func startMembers(t *testing.T, bin string, n int) []*member {
	t.Helper()
	var (
		members []*member
		peers   []string
		peerURL []string
	)
	for i := range n {
		cp, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		pp, err := freeport.Port()
		if err != nil {
			t.Fatal(err)
		}
		m := &member{name: "n" + strconv.Itoa(i+1), clientURL: "http://127.0.0.1:" + strconv.Itoa(cp)}
		peerURL = append(peerURL, "http://127.0.0.1:"+strconv.Itoa(pp))
		peers = append(peers, m.name+"="+peerURL[i])
		members = append(members, m)
	}
	base := t.TempDir()
	for i, m := range members {
		m.log = filepath.Join(base, m.name+".log")
		logf, err := os.Create(m.log)
		if err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(bin, "metadata",
			"--name", m.name,
			"--data-dir", filepath.Join(base, m.name),
			"--listen-client-url", m.clientURL,
			"--listen-peer-url", peerURL[i],
			"--initial-cluster", strings.Join(peers, ","),
			"--initial-cluster-state", "new")
		m.cmd.Stdout, m.cmd.Stderr = logf, logf
		if err := m.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", m.name, err)
		}
		_ = logf.Close() // the child holds its own descriptor
		m.exited = make(chan struct{})
		go func() {
			_ = m.cmd.Wait()
			close(m.exited)
		}()
		t.Cleanup(func() {
			_ = m.cmd.Process.Kill()
			<-m.exited
			if t.Failed() {
				out, _ := os.ReadFile(m.log)
				t.Logf("log of %s:\n%s", m.name, out)
			}
		})
	}
	return members
}

func (m *member) kill(t *testing.T) {
	t.Helper()
	if err := m.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatalf("kill %s: %v", m.name, err)
	}
	<-m.exited
}

// TestClusterProcesses runs the conformance suite against a three-member
// cluster of real `magnetar metadata` processes, then SIGKILLs the leader
// and checks that the two survivors still serve every kind of operation.
func TestClusterProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes")
	}
	began := time.Now()
	defer func() {
		if d := time.Since(began); d > 30*time.Second {
			t.Logf("note: the process cluster test took %v (binary build included)", d.Round(time.Second))
		}
	}()
	bin := buildMagnetar(t)
	members := startMembers(t, bin, 3)
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.clientURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The members serve clients once a quorum formed.
	admin := adminClient(t, endpoints)
	waitFor(ctx, t, "cluster to serve", func() error {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := admin.Get(c, "/ready")
		return err
	})

	newStore := func(t *testing.T, prefix string) *etcdstore.Store {
		s, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: endpoints, Prefix: prefix, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	cli := func(metadata.Store) *clientv3.Client { return admin }
	metadatatest.Run(t, metadatatest.Harness{
		New: func(t *testing.T) metadata.Store {
			return newStore(t, fmt.Sprintf("/cluster/%d", prefixSeq.Add(1)))
		},
		ExpireSession: revoker(cli),
		Compact:       compactor(cli),
	})
	if t.Failed() {
		return
	}

	// State created with all three members up.
	s := newStore(t, "/failover")
	sess, err := s.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	v, err := s.Create(ctx, "/k", []byte("before"))
	if err != nil {
		t.Fatal(err)
	}
	id0, err := s.NextID(ctx, "seq")
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, "/", int64(v)+1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// SIGKILL the leader: the survivors must elect a new one.
	victim := leaderOf(ctx, t, admin, members)
	victim.kill(t)
	t.Logf("killed leader %s", victim.name)

	var v2 metadata.Version
	waitFor(ctx, t, "a write after the kill", func() error {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		v2, err = s.Put(c, "/k", []byte("after"), v)
		if errors.Is(err, metadata.ErrBadVersion) {
			// An earlier attempt applied but its reply was lost.
			kv, gerr := s.Get(c, "/k")
			if gerr == nil && string(kv.Value) == "after" {
				v2, err = kv.Version, nil
			}
		}
		return err
	})
	kv, err := s.Get(ctx, "/k")
	if err != nil || string(kv.Value) != "after" || kv.Version != v2 {
		t.Fatalf("Get after kill = %+v, %v", kv, err)
	}
	if _, err := s.Put(ctx, "/k", []byte("stale"), v); !errors.Is(err, metadata.ErrBadVersion) {
		t.Fatalf("stale CAS after kill: %v", err)
	}
	// The session made before the kill still holds; a new one works too.
	select {
	case <-sess.Done():
		t.Fatal("session lost with the leader")
	default:
	}
	if _, err := sess.CreateEphemeral(ctx, "/eph/old", nil); err != nil {
		t.Fatalf("ephemeral on the old session: %v", err)
	}
	sess2, err := s.NewSession(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess2.CreateEphemeral(ctx, "/eph/new", nil); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Children(ctx, "/eph"); err != nil || strings.Join(c, ",") != "new,old" {
		t.Fatalf("Children(/eph) = %q, %v", c, err)
	}
	if err := sess2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "/eph/new"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("ephemeral key after session close: %v", err)
	}
	if id, err := s.NextID(ctx, "seq"); err != nil || id != id0+1 {
		t.Fatalf("NextID after kill = %d, %v; want %d", id, err, id0+1)
	}
	// The watch went on through the failover, in order and without gaps.
	want := []string{"put /k", "put /eph/old", "put /eph/new", "delete /eph/new"}
	for i, wnt := range want {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			if got := ev.Type.String() + " " + ev.Key; got != wnt {
				t.Fatalf("event %d = %s, want %s", i, got, wnt)
			}
		case <-ctx.Done():
			t.Fatalf("watch: timeout at event %d", i)
		}
	}
}

// leaderOf returns the member that leads the cluster.
func leaderOf(ctx context.Context, t *testing.T, admin *clientv3.Client, members []*member) *member {
	t.Helper()
	ids := make(map[uint64]*member)
	var leader uint64
	for _, m := range members {
		st, err := admin.Status(ctx, m.clientURL)
		if err != nil {
			t.Fatalf("status of %s: %v", m.name, err)
		}
		ids[st.Header.MemberId] = m
		leader = st.Leader
	}
	if m := ids[leader]; m != nil {
		return m
	}
	t.Fatalf("leader %x is none of the members", leader)
	return nil
}

// waitFor polls cond until it returns nil or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() error) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
	}
}
