package kubenode

import (
	"context"
	"log/slog"
	"os"
	"sort"
	"testing"
	"time"
)

// StartTimeout bounds Run's Start: building the pause image, waiting for
// another node on the machine to stop, and the node's own start (under a
// minute on 2 shared cores).
const StartTimeout = 5 * time.Minute

// Run starts a node for t (skipping or failing it as Require does when the
// binaries are missing) and stops it when t ends, failing t if the host
// could not be put back. When t fails, the tail of every process's log is
// logged.
func Run(t testing.TB, cfg Config) *Node {
	t.Helper()
	cfg.BinDir = Require(t)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting the Kubernetes node: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("MAGNETAR_KUBE_LOGS") == "1" {
			logs := n.Logs(8192)
			names := make([]string, 0, len(logs))
			for name := range logs {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				t.Logf("--- %s log (tail) ---\n%s", name, logs[name])
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		t0 := time.Now()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("stopping the Kubernetes node: %v", err)
		}
		t.Logf("node stopped and host restored in %v", time.Since(t0).Round(time.Millisecond))
	})
	return n
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(b))
	return len(b), nil
}
