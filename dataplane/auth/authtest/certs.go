// Package authtest makes certificates and keys for tests of package auth
// and of the servers that use it: a CA, server and client certificates
// written as PEM files.
package authtest

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
)

// validity of the test CA and of the certificates it issues.
const validity = 24 * time.Hour

// CA is a test certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	// File is the CA certificate's PEM file (a trust file).
	File string
	ca   *pki.CA
	dir  string
}

// NewCA creates a CA whose files live in t's temp dir.
func NewCA(t testing.TB) *CA {
	t.Helper()
	c, err := pki.Create("magnetar test CA", validity)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: c.Cert, CertPEM: c.CertPEM, ca: c, dir: t.TempDir()}
	ca.File = filepath.Join(ca.dir, "ca.pem")
	if err := os.WriteFile(ca.File, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return ca
}

// Issue writes a certificate for cn (and hosts as SANs: IPs or DNS names)
// and its key, returning the two file paths. name distinguishes the files.
func (ca *CA) Issue(t testing.TB, name, cn string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	l, err := ca.ca.Issue(cn, hosts, validity)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(ca.dir, name+".pem")
	keyFile = filepath.Join(ca.dir, name+"-key.pem")
	if err := pki.WriteLeaf(l, certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
