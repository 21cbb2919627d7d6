package pki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLoadOrCreateAndIssue(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, created, err := LoadOrCreate(dir, "test CA", 24*time.Hour)
	if err != nil || !created {
		t.Fatalf("LoadOrCreate = %v, created %v", err, created)
	}
	if fi, err := os.Stat(filepath.Join(dir, KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", err, fi.Mode())
	}
	again, created, err := LoadOrCreate(dir, "other", time.Hour)
	if err != nil || created || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("second LoadOrCreate = %v, created %v, same CA %v", err, created, again.Cert.Equal(ca.Cert))
	}

	leaf, err := again.Issue("broker-0", []string{"127.0.0.1", "localhost"}, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Cert.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("leaf outlives its CA: %v > %v", leaf.Cert.NotAfter, ca.Cert.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		for _, name := range []string{"127.0.0.1", "localhost"} {
			if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
				t.Errorf("verify for %s, usage %v: %v", name, use, err)
			}
		}
	}
	if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("leaf verifies for a name it was not issued for")
	}
	if !ca.Signed(leaf.Cert) {
		t.Error("Signed = false for the CA's own leaf")
	}
	other, err := Create("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if other.Signed(leaf.Cert) {
		t.Error("another CA claims the leaf")
	}

	certFile, keyFile := filepath.Join(t.TempDir(), "l.pem"), filepath.Join(t.TempDir(), "l-key.pem")
	if err := WriteLeaf(leaf, certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCert(certFile)
	if err != nil || !got.Equal(leaf.Cert) {
		t.Fatalf("ReadCert = %v", err)
	}
}

// TestLoadOrCreateRefusesHalfACA: a key without its certificate is damage
// to report, not a reason to make a new CA.
func TestLoadOrCreateRefusesHalfACA(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := LoadOrCreate(dir, "CA", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, CertFile)); err != nil {
		t.Fatal(err)
	}
	if _, created, err := LoadOrCreate(dir, "CA", time.Hour); err == nil || created {
		t.Fatalf("LoadOrCreate with the certificate gone = %v, created %v", err, created)
	}
}
