package auth

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/auth/authtest"
)

// TestClientCertReloader: the client presents its certificate, verifies
// the server against the trust file, and presents a new certificate once
// the files change.
func TestClientCertReloader(t *testing.T) {
	ca := authtest.NewCA(t)
	scert, skey := ca.Issue(t, "server", "server", "127.0.0.1")
	srv, err := NewCertReloader(TLSFiles{CertFile: scert, KeyFile: skey, TrustFile: ca.File, RequireClientCert: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peers := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil && len(tc.ConnectionState().PeerCertificates) > 0 {
				peers <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			} else {
				peers <- ""
			}
			c.Close()
		}
	}()

	ccert, ckey := ca.Issue(t, "client", "client-1")
	cl, err := NewClientCertReloader(TLSFiles{CertFile: ccert, KeyFile: ckey, TrustFile: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cl.now = func() time.Time { return now }
	dial := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), cl.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		return <-peers
	}
	if got := dial(); got != "client-1" {
		t.Fatalf("server saw client %q, want client-1", got)
	}
	ca.Issue(t, "client", "client-2") // same files, new certificate
	now = now.Add(2 * reloadCheckInterval)
	if got := dial(); got != "client-2" {
		t.Fatalf("after rotation the server saw client %q, want client-2", got)
	}

	other := authtest.NewCA(t)
	wrong, err := NewClientCertReloader(TLSFiles{TrustFile: other.File})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := tls.Dial("tcp", ln.Addr().String(), wrong.ClientConfig()); err == nil {
		c.Close()
		t.Fatal("a client trusting another CA accepted the server")
	}
	<-peers // the server's side of the refused handshake

	if _, err := NewClientCertReloader(TLSFiles{CertFile: ccert, TrustFile: ca.File}); err == nil {
		t.Fatal("a client certificate without its key was accepted")
	}
}
