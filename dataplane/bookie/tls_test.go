package bookie_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/auth/authtest"
	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/storage/memstorage"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/memstore"
)

// tlsBookie starts a bookie serving TLS with a certificate of ca; with
// requireClientCert it refuses clients without one signed by ca.
func tlsBookie(t *testing.T, ca *authtest.CA, name string, requireClientCert bool, md metadata.Store) *bookie.Server {
	t.Helper()
	cert, key := ca.Issue(t, name, name, "127.0.0.1", "localhost")
	r, err := auth.NewCertReloader(auth.TLSFiles{CertFile: cert, KeyFile: key, TrustFile: ca.File, RequireClientCert: requireClientCert})
	if err != nil {
		t.Fatal(err)
	}
	cfg := bookie.Config{ListenAddr: "127.0.0.1:0", TLS: r.ServerConfig(), Logger: slog.New(slog.DiscardHandler)}
	if md != nil {
		cfg.DataDir = t.TempDir()
	}
	s, err := bookie.New(cfg, memstorage.New(), md)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

// clientTLS is a client configuration trusting ca, with a client
// certificate of ca when name is not empty.
func clientTLS(t *testing.T, ca *authtest.CA, name string) *tls.Config {
	t.Helper()
	files := auth.TLSFiles{TrustFile: ca.File}
	if name != "" {
		files.CertFile, files.KeyFile = ca.Issue(t, name, name)
	}
	r, err := auth.NewClientCertReloader(files)
	if err != nil {
		t.Fatal(err)
	}
	return r.ClientConfig()
}

func addTo(c *wire.Conn, ledger, entry int64, payload string) error {
	p := []byte(payload)
	ch := make(chan error, 1)
	c.Add(&wire.AddRequest{LedgerID: ledger, EntryID: entry, LAC: entry - 1, Payload: p,
		Checksum: wire.Checksum(ledger, entry, entry-1, p)}, wire.AddFunc(func(err error) { ch <- err }))
	return <-ch
}

// TestTLSAddAndRead writes and reads entries over mutual TLS.
func TestTLSAddAndRead(t *testing.T) {
	ca := authtest.NewCA(t)
	s := tlsBookie(t, ca, "bookie-1", true, nil)
	c, err := wire.Dial(t.Context(), s.Addr().String(), wire.ClientConfig{TLS: clientTLS(t, ca, "broker")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for e := range int64(20) {
		if err := addTo(c, 7, e, fmt.Sprintf("entry-%d", e)); err != nil {
			t.Fatalf("add %d: %v", e, err)
		}
	}
	ent, err := c.Read(t.Context(), 7, 19, 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(ent.Payload) != "entry-19" {
		t.Fatalf("read %q", ent.Payload)
	}
}

// TestTLSRefusals: a client without a certificate, one trusting another
// CA, and a plain-text client are each refused with an error (not left
// hanging), and a TLS client is refused by a plain bookie.
func TestTLSRefusals(t *testing.T) {
	ca := authtest.NewCA(t)
	s := tlsBookie(t, ca, "bookie-1", true, nil)
	addr := s.Addr().String()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	dialErr := func(cfg wire.ClientConfig) error {
		c, err := wire.Dial(ctx, addr, cfg)
		if err == nil {
			c.Close()
			return errors.New("connected")
		}
		if ctx.Err() != nil {
			t.Fatalf("dial hung until the test's deadline: %v", err)
		}
		return err
	}
	if err := dialErr(wire.ClientConfig{TLS: clientTLS(t, ca, "")}); !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("TLS client without a certificate: %v, want the server's certificate required alert", err)
	}
	other := authtest.NewCA(t)
	if err := dialErr(wire.ClientConfig{TLS: clientTLS(t, other, "broker")}); !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("TLS client trusting another CA: %v", err)
	}
	if err := dialErr(wire.ClientConfig{}); !errors.Is(err, wire.ErrConnClosed) && !errors.Is(err, wire.ErrTooLarge) && !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("plain client: %v", err)
	}

	// A raw plain-text handshake frame gets at most a TLS alert, then EOF.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fw := wire.NewFrameWriter(nc, 0)
	if err := fw.WriteRequest(&wire.Request{Op: wire.OpHandshake, RequestID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := fw.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard: the server closes at once
	got, err := io.ReadAll(nc)
	if err != nil {
		t.Fatalf("plain-text client on the TLS port: read %q then %v, want the server to close the connection", got, err)
	}
	if len(got) > 0 && got[0] != 0x15 { // 0x15: a TLS alert record
		t.Fatalf("plain-text client on the TLS port got %q, want nothing or a TLS alert", got)
	}

	// The refused clients left the bookie serving others.
	c, err := wire.Dial(ctx, addr, wire.ClientConfig{TLS: clientTLS(t, ca, "broker")})
	if err != nil {
		t.Fatalf("a good client after the refusals: %v", err)
	}
	c.Close()

	plain, err := bookie.New(bookie.Config{ListenAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}, memstorage.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer plain.Shutdown(context.Background())
	addr = plain.Addr().String()
	if err := dialErr(wire.ClientConfig{TLS: clientTLS(t, ca, "broker")}); err == nil {
		t.Fatal("TLS client connected to a plain bookie")
	}
}

// TestTLSLedgerClient runs the ledger client over a pool dialing three
// TLS bookies that require client certificates: a ledger is written,
// closed and read back.
func TestTLSLedgerClient(t *testing.T) {
	ca := authtest.NewCA(t)
	md := memstore.New()
	defer md.Close()
	for i := range 3 {
		tlsBookie(t, ca, fmt.Sprintf("bookie-%d", i), true, md)
	}
	pool := wire.NewPool(wire.ClientConfig{TLS: clientTLS(t, ca, "broker")})
	defer pool.Close()
	cl, err := client.New(client.Config{Metadata: md, Dialer: client.PoolDialer{Pool: pool}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	w, err := cl.CreateLedger(ctx, client.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		if _, err := w.Append(ctx, []byte(fmt.Sprintf("entry-%d", i))); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := cl.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := r.Read(ctx, 0, n-1)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		if want := []byte(fmt.Sprintf("entry-%d", i)); !bytes.Equal(e.Payload, want) {
			t.Fatalf("entry %d = %q, want %q", i, e.Payload, want)
		}
	}
}

// BenchmarkAdd measures pipelined 1 KiB adds over one connection (256 in
// flight) to a bookie on in-memory storage, over plain TCP and over
// mutual TLS.
func BenchmarkAdd(b *testing.B) {
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			var srvTLS, cliTLS *tls.Config
			if mode == "tls" {
				ca := authtest.NewCA(b)
				cert, key := ca.Issue(b, "bookie", "bookie", "127.0.0.1")
				r, err := auth.NewCertReloader(auth.TLSFiles{CertFile: cert, KeyFile: key, TrustFile: ca.File, RequireClientCert: true})
				if err != nil {
					b.Fatal(err)
				}
				srvTLS = r.ServerConfig()
				ccert, ckey := ca.Issue(b, "client", "client")
				cr, err := auth.NewClientCertReloader(auth.TLSFiles{CertFile: ccert, KeyFile: ckey, TrustFile: ca.File})
				if err != nil {
					b.Fatal(err)
				}
				cliTLS = cr.ClientConfig()
			}
			s, err := bookie.New(bookie.Config{ListenAddr: "127.0.0.1:0", TLS: srvTLS, Logger: slog.New(slog.DiscardHandler)}, memstorage.New(), nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			c, err := wire.Dial(context.Background(), s.Addr().String(), wire.ClientConfig{TLS: cliTLS})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			payload := bytes.Repeat([]byte("x"), 1024)
			window := make(chan struct{}, 256)
			errs := make(chan error, 1)
			done := wire.AddFunc(func(err error) {
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
				<-window
			})
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range int64(b.N) {
				window <- struct{}{}
				c.Add(&wire.AddRequest{LedgerID: 1, EntryID: i, LAC: i - 1, Payload: payload,
					Checksum: wire.Checksum(1, i, i-1, payload)}, done)
			}
			for range cap(window) {
				window <- struct{}{}
			}
			b.StopTimer()
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
		})
	}
}
