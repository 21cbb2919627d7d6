package etcdstore_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/auth/authtest"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/etcdstore"
	"github.com/magnetar-dev/magnetar/dataplane/metadata/metadatatest"
)

// startTLSServer starts a member serving clients and peers over TLS with
// certificates of ca, requiring client certificates on both.
func startTLSServer(t *testing.T, ca *authtest.CA) *etcdstore.Server {
	t.Helper()
	cert, key := ca.Issue(t, "etcd", "etcd", "127.0.0.1", "localhost")
	cfg := testConfig(t)
	cfg.ClientTLS = etcdstore.ServerTLS{CertFile: cert, KeyFile: key, TrustFile: ca.File, ClientCertAuth: true}
	cfg.PeerTLS = cfg.ClientTLS
	srv, err := etcdstore.StartServer(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	for _, u := range append(srv.ClientURLs(), srv.Config().PeerURL) {
		if !strings.HasPrefix(u, "https://") {
			t.Fatalf("TLS member serves on %s", u)
		}
	}
	return srv
}

// tlsClient is a client configuration trusting ca, with a client
// certificate named name when name is not empty.
func tlsClient(t *testing.T, ca *authtest.CA, name string) *tls.Config {
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

// TestTLSConformance runs the suite through etcdstore.New over mutual TLS,
// restarts included.
func TestTLSConformance(t *testing.T) {
	ca := authtest.NewCA(t)
	srv := startTLSServer(t, ca)
	conf := tlsClient(t, ca, "client")
	admin, err := clientv3.New(clientv3.Config{Endpoints: srv.ClientURLs(), DialTimeout: 5 * time.Second, TLS: conf, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	cli := func(metadata.Store) *clientv3.Client { return admin }
	metadatatest.Run(t, metadatatest.Harness{
		New: func(t *testing.T) metadata.Store {
			s, err := etcdstore.New(testCtx(t), etcdstore.Config{
				Endpoints: srv.ClientURLs(),
				Prefix:    fmt.Sprintf("/tls/%d", prefixSeq.Add(1)),
				TLS:       conf,
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

// TestTLSRefusals: a client without a certificate, one trusting another
// CA and a plain-text one fail to connect within the dial timeout, and
// raw plain-text bytes on the TLS port are answered by a closed
// connection.
func TestTLSRefusals(t *testing.T) {
	ca := authtest.NewCA(t)
	srv := startTLSServer(t, ca)
	u, err := url.Parse(srv.ClientURLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		endpoint string
		tls      *tls.Config
	}{
		{"no client certificate", srv.ClientURLs()[0], tlsClient(t, ca, "")},
		{"another CA", srv.ClientURLs()[0], tlsClient(t, authtest.NewCA(t), "client")},
		{"plain text", "http://" + u.Host, nil},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := etcdstore.New(ctx, etcdstore.Config{Endpoints: []string{tc.endpoint}, TLS: tc.tls,
			DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err == nil {
			s.Close()
			t.Errorf("%s: connected", tc.name)
		} else if ctx.Err() != nil {
			t.Errorf("%s: New returned only at the test's deadline: %v", tc.name, err)
		}
		cancel()
	}

	nc, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// An HTTP/2 client preface in plain text, as a gRPC client without TLS
	// sends it.
	if _, err := nc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard: the server closes at once
	if got, err := io.ReadAll(nc); err != nil {
		t.Fatalf("plain text on the TLS port: read %q then %v, want the server to close the connection", got, err)
	}
}
