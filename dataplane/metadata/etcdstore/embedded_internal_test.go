package etcdstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// TestStartRetriesTakenPort: a port picked for an absent URL that another
// socket takes before etcd binds it makes the start pick again, and a port
// the caller named is never replaced.
func TestStartRetriesTakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls <= 2 {
			return port, nil // the first start's client and peer ports
		}
		return freeport.Port()
	}
	defer func() { pickPort = freeport.Port }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := EmbeddedConfig{Dir: t.TempDir(), UnsafeNoFsync: true,
		HeartbeatInterval: 10 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, Logger: zap.NewNop()}
	srv, err := StartServer(ctx, cfg)
	if err != nil {
		t.Fatalf("start with a taken port picked: %v", err)
	}
	defer srv.Close()
	if calls < 4 {
		t.Fatalf("ports picked %d times, want a second pick after the taken one", calls)
	}
	if got := srv.Config().ClientURL; got == "http://127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("server kept the taken port %s", got)
	}

	cfg.Dir = t.TempDir()
	cfg.ClientURL = "http://" + taken.Addr().String()
	if _, err := StartServer(ctx, cfg); err == nil || !addrInUse(err) {
		t.Fatalf("start on a named taken port = %v, want address in use", err)
	}
}

// TestLoneMemberTimings: a member that starts alone gets the short raft
// timings; a member of a multi-member cluster and explicit timings are
// left to the caller and etcd.
func TestLoneMemberTimings(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cfg           EmbeddedConfig
		wantHB, wantE time.Duration
	}{
		{"alone", EmbeddedConfig{Dir: "d"}, LoneHeartbeatInterval, LoneElectionTimeout},
		{"alone by name", EmbeddedConfig{Dir: "d", Name: "m1", PeerURL: "http://127.0.0.1:1", InitialCluster: "m1=http://127.0.0.1:1"}, LoneHeartbeatInterval, LoneElectionTimeout},
		{"three members", EmbeddedConfig{Dir: "d", Name: "m1", PeerURL: "http://127.0.0.1:1",
			InitialCluster: "m1=http://127.0.0.1:1,m2=http://127.0.0.1:2,m3=http://127.0.0.1:3"}, 0, 0},
		{"explicit", EmbeddedConfig{Dir: "d", HeartbeatInterval: 10 * time.Millisecond}, 10 * time.Millisecond, 0},
	} {
		got, err := tc.cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got.HeartbeatInterval != tc.wantHB || got.ElectionTimeout != tc.wantE {
			t.Errorf("%s: heartbeat %v, election %v; want %v, %v", tc.name, got.HeartbeatInterval, got.ElectionTimeout, tc.wantHB, tc.wantE)
		}
		ec, err := got.etcdConfig()
		if err != nil {
			t.Fatal(err)
		}
		if tc.wantE == LoneElectionTimeout && (ec.TickMs != 50 || ec.ElectionMs != 250) {
			t.Errorf("%s: etcd ticks %d ms, election %d ms", tc.name, ec.TickMs, ec.ElectionMs)
		}
		// Raft entries kept for followers: few for a lone member, since
		// one entry may hold a batch of writes.
		wantCatchUp := uint64(DefaultCatchUpEntries)
		if strings.HasPrefix(tc.name, "alone") || tc.name == "explicit" {
			wantCatchUp = LoneCatchUpEntries
		}
		if ec.SnapshotCatchUpEntries != wantCatchUp {
			t.Errorf("%s: etcd keeps %d entries for followers, want %d", tc.name, ec.SnapshotCatchUpEntries, wantCatchUp)
		}
	}
}

// TestQuietCore: the benign storage-version error is dropped, other errors
// pass, and nothing below fatal passes while the server closes.
func TestQuietCore(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	var closing atomic.Bool
	lg := zap.New(quietCore{core, &closing})
	lg.Error(benignStartupError, zap.Error(errors.New("cannot detect storage schema version: missing term information")))
	lg.Error("something else")
	closing.Store(true)
	lg.Error("listener closed")
	if got := logs.All(); len(got) != 1 || got[0].Message != "something else" {
		t.Fatalf("logged %v, want only \"something else\"", got)
	}
}
