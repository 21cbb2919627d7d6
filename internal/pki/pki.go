// Package pki is a small certificate authority: it creates an ECDSA P-256
// CA, keeps it as two PEM files, and issues leaf certificates valid for
// both server and client authentication (one certificate serves a
// process's listeners and its outgoing mutual-TLS connections).
//
// Files. A CA kept in a directory is
//
//	ca.pem      the CA certificate (0644): the trust bundle clients use
//	ca-key.pem  its PKCS#8 private key (0600)
//
// Leaf certificates are returned as PEM blocks (CERTIFICATE; PRIVATE KEY in
// PKCS#8); WriteLeaf writes them with the same modes.
//
// Callers: the process provisioner (a CA per region) and the test helpers
// of package auth (dataplane/auth/authtest). Concurrency: a CA is
// immutable after Create or Load; Issue is safe for concurrent use.
// LoadOrCreate is not safe against another process creating the same
// directory at the same moment (the provisioner holds its data directory).
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names of a CA kept in a directory.
const (
	CertFile = "ca.pem"
	KeyFile  = "ca-key.pem"
)

// backdate is how far before now certificates become valid, so that a
// peer whose clock is a little behind accepts them.
const backdate = time.Hour

// CA is a certificate authority: its certificate and signing key.
type CA struct {
	Cert *x509.Certificate
	// CertPEM is Cert as one PEM block: the trust bundle.
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// Create makes a self-signed CA named cn, valid for validity from now.
func Create(cn string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-backdate), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}, nil
}

// Load reads the CA kept in dir.
func Load(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", filepath.Join(dir, CertFile), err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("pki: %s holds no PEM block", filepath.Join(dir, KeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", filepath.Join(dir, KeyFile), err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("pki: %s is not the key of %s", filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", filepath.Join(dir, CertFile))
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key}, nil
}

// LoadOrCreate loads the CA kept in dir, or creates one (named cn, valid
// for validity) and writes it there when dir holds none. created reports
// which.
func LoadOrCreate(dir, cn string, validity time.Duration) (ca *CA, created bool, err error) {
	_, certErr := os.Stat(filepath.Join(dir, CertFile))
	_, keyErr := os.Stat(filepath.Join(dir, KeyFile))
	if !errors.Is(certErr, os.ErrNotExist) || !errors.Is(keyErr, os.ErrNotExist) {
		// One file without the other is damage, reported by Load, not
		// papered over with a new CA that nothing trusts yet.
		ca, err := Load(dir)
		return ca, false, err
	}
	if ca, err = Create(cn, validity); err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("pki: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, false, fmt.Errorf("pki: %w", err)
	}
	// The key first: a crash between the two writes leaves a key without a
	// certificate, which Load reports, never a certificate whose key is lost.
	if err := writeAtomic(filepath.Join(dir, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, false, err
	}
	if err := writeAtomic(filepath.Join(dir, CertFile), ca.CertPEM, 0o644); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// Leaf is an issued certificate and its key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

// Issue makes a certificate for cn, valid for validity from now (but never
// past the CA's own expiry), usable for server and client authentication,
// with hosts as its subject alternative names (IP addresses or DNS names).
func (ca *CA) Issue(cn string, hosts []string, validity time.Duration) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, fmt.Errorf("pki: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return Leaf{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-backdate), NotAfter: now.Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, fmt.Errorf("pki: issue %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Leaf{}, fmt.Errorf("pki: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Leaf{}, fmt.Errorf("pki: %w", err)
	}
	return Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		Cert:    cert,
	}, nil
}

// Signed reports whether cert was issued by ca (its signature verifies
// with ca's key).
func (ca *CA) Signed(cert *x509.Certificate) bool {
	return cert.CheckSignatureFrom(ca.Cert) == nil
}

// WriteLeaf writes l's certificate (0644) and key (0600), each replaced
// atomically: a process reloading them sees the old pair or the new one.
// The key is written first; a reader that catches the new key with the
// old certificate fails to load the pair and keeps what it had.
func WriteLeaf(l Leaf, certFile, keyFile string) error {
	if err := writeAtomic(keyFile, l.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certFile, l.CertPEM, 0o644)
}

// ParseCert decodes the first certificate of a PEM bundle.
func ParseCert(pemBytes []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, pemBytes = pem.Decode(pemBytes)
		if b == nil {
			return nil, errors.New("no PEM certificate")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

// ReadCert reads and decodes the first certificate of a PEM file.
func ReadCert(file string) (*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	c, err := ParseCert(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// writeAtomic writes b to path through a temporary file and a rename.
func writeAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	// WriteFile keeps the mode of an existing temporary file.
	if err := os.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}
