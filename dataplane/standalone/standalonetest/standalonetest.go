// Package standalonetest starts in-process standalones and real Pulsar Go
// clients for tests: free loopback ports, temporary data directories, quiet
// logs and cleanup registered with the test.
package standalonetest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// QuietLogger discards everything.
func QuietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Config returns a standalone configuration on dir with ephemeral broker and
// HTTP ports and the given bookie address (which must stay the same across
// restarts on dir). The journal is not synced: tests that kill processes
// use the real binary instead.
func Config(dir, bookieAddr string) standalone.Config {
	return standalone.Config{
		DataDir: dir, BrokerAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", BookieAddr: bookieAddr,
		JournalNoSync: true, Logger: QuietLogger(),
	}
}

// Start runs a standalone with cfg and shuts it down when the test ends.
func Start(t testing.TB, cfg standalone.Config) *standalone.Standalone {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := standalone.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(sctx); err != nil {
			t.Errorf("standalone shutdown: %v", err)
		}
	})
	return s
}

// NewClient returns a Pulsar Go client for url, closed when the test ends.
func NewClient(t testing.TB, url string) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: url, OperationTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithSlog(QuietLogger()),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
