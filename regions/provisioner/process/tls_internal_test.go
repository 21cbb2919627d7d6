package process

import (
	"crypto/x509"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
)

// TestEnsureCert: a missing certificate is issued, one near its expiry or
// signed by another CA is replaced, a good one is kept.
func TestEnsureCert(t *testing.T) {
	p, err := New(Config{DataDir: t.TempDir(), Binary: "/bin/true", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := &cluster{dir: filepath.Join(p.cfg.DataDir, clustersSubdir, "o-c"), st: state{Name: "organizations/o/clusters/c"}}
	m := &member{Role: "bookie", Addr: "127.0.0.1:4181"}
	f := c.tlsFiles(m)
	read := func() *x509.Certificate {
		t.Helper()
		cert, err := pki.ReadCert(f.cert)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}

	if err := p.ensureCert(c, m); err != nil {
		t.Fatal(err)
	}
	first := read()
	ca, err := p.regionCA()
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Signed(first) || first.NotAfter.Before(time.Now().Add(certValidity-time.Hour)) {
		t.Fatalf("issued certificate: signed %v, expires %v", ca.Signed(first), first.NotAfter)
	}
	if trust, err := pki.ReadCert(f.trust); err != nil || !trust.Equal(ca.Cert) {
		t.Fatalf("trust file: %v", err)
	}

	// A new provisioner's first pass (no expiry in memory) keeps it.
	m.certExpires = time.Time{}
	if err := p.ensureCert(c, m); err != nil {
		t.Fatal(err)
	}
	if !read().Equal(first) {
		t.Fatal("a good certificate was replaced")
	}

	for name, leaf := range map[string]func() (pki.Leaf, error){
		"near expiry": func() (pki.Leaf, error) { return ca.Issue("x", m.hosts(), certRenewBefore-time.Hour) },
		"another CA": func() (pki.Leaf, error) {
			other, err := pki.Create("other", time.Hour*24*365)
			if err != nil {
				return pki.Leaf{}, err
			}
			return other.Issue("x", m.hosts(), certValidity)
		},
	} {
		l, err := leaf()
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteLeaf(l, f.cert, f.key); err != nil {
			t.Fatal(err)
		}
		m.certExpires = time.Time{}
		if err := p.ensureCert(c, m); err != nil {
			t.Fatal(err)
		}
		got := read()
		if got.Equal(l.Cert) || !ca.Signed(got) || got.NotAfter.Before(time.Now().Add(certRenewBefore)) {
			t.Errorf("%s: certificate not replaced by a fresh one of the region CA (expires %v)", name, got.NotAfter)
		}
	}
}
