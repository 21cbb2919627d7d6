package process

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
)

// Certificates of the region CA and of the processes.
const (
	caSubdir = "ca"
	tlsDir   = "tls" // in a cluster's directory
	trustPEM = "ca.pem"
	// caValidity is the region CA's lifetime; it is not renewed.
	caValidity = 10 * 365 * 24 * time.Hour
	// certValidity is a process certificate's lifetime; the supervisor
	// issues a new one once less than certRenewBefore is left, and the
	// process re-reads it from disk without a restart.
	certValidity    = 90 * 24 * time.Hour
	certRenewBefore = 30 * 24 * time.Hour
)

// regionCA returns the provisioner's CA, loading it from
// <DataDir>/ca or creating it there on first use.
func (p *Provisioner) regionCA() (*pki.CA, error) {
	p.caMu.Lock()
	defer p.caMu.Unlock()
	if p.ca != nil {
		return p.ca, nil
	}
	dir := filepath.Join(p.cfg.DataDir, caSubdir)
	ca, created, err := pki.LoadOrCreate(dir, "magnetar region CA "+filepath.Base(p.cfg.DataDir), caValidity)
	if err != nil {
		return nil, fmt.Errorf("process: region CA: %w", err)
	}
	if created {
		p.log.Info("process: created the region CA", "dir", dir, "expires", ca.Cert.NotAfter)
	}
	p.ca = ca
	return ca, nil
}

// tlsFiles are the paths of a process's certificate, key and trust file.
type tlsFiles struct{ cert, key, trust string }

func (c *cluster) tlsFiles(m *member) tlsFiles {
	d := filepath.Join(c.dir, tlsDir)
	return tlsFiles{cert: filepath.Join(d, m.id()+".pem"), key: filepath.Join(d, m.id()+"-key.pem"), trust: filepath.Join(d, trustPEM)}
}

// ensureCert makes sure m has a certificate of the region CA that is not
// about to expire, and that the cluster's trust file holds the CA: it
// issues (or renews) the certificate when it is missing, unreadable,
// signed by another CA or within certRenewBefore of its expiry. Processes
// re-read both files when they change. Called with c.mu held.
func (p *Provisioner) ensureCert(c *cluster, m *member) error {
	if m.certExpires.After(time.Now().Add(certRenewBefore)) {
		return nil
	}
	ca, err := p.regionCA()
	if err != nil {
		return err
	}
	f := c.tlsFiles(m)
	if err := os.MkdirAll(filepath.Dir(f.cert), 0o700); err != nil {
		return fmt.Errorf("process: %w", err)
	}
	if old, err := os.ReadFile(f.trust); err != nil || !bytes.Equal(old, ca.CertPEM) {
		if err := os.WriteFile(f.trust+".tmp", ca.CertPEM, 0o644); err != nil {
			return fmt.Errorf("process: %w", err)
		}
		if err := os.Rename(f.trust+".tmp", f.trust); err != nil {
			return fmt.Errorf("process: %w", err)
		}
	}
	if cert, err := pki.ReadCert(f.cert); err == nil && ca.Signed(cert) && cert.NotAfter.After(time.Now().Add(certRenewBefore)) {
		if _, err := os.Stat(f.key); err == nil {
			m.certExpires = cert.NotAfter
			return nil
		}
	}
	leaf, err := ca.Issue(filepath.Base(c.dir)+"-"+m.id(), m.hosts(), certValidity)
	if err != nil {
		return err
	}
	if err := pki.WriteLeaf(leaf, f.cert, f.key); err != nil {
		return err
	}
	m.certExpires = leaf.Cert.NotAfter
	p.log.Info("process: issued a certificate", "cluster", c.st.Name, "process", m.id(), "expires", leaf.Cert.NotAfter)
	return nil
}

// hosts are the subject alternative names of m's certificate: loopback and
// the hosts of its addresses.
func (m *member) hosts() []string {
	hs := []string{"127.0.0.1", "::1", "localhost"}
	for _, a := range []string{m.Addr, m.PeerAddr, m.HTTPAddr, m.TLSAddr, m.HTTPSAddr} {
		h, _, err := net.SplitHostPort(a)
		if err != nil || h == "" {
			continue
		}
		dup := false
		for _, o := range hs {
			dup = dup || o == h
		}
		if !dup {
			hs = append(hs, h)
		}
	}
	return hs
}

// tlsArgs are the flags of m's TLS: its listeners' certificate and the
// certificates of its links to the metadata store and the bookies. Every
// internal listener (etcd clients and peers, bookies) requires a client
// certificate of the region CA; the brokers' Pulsar and admin TLS
// listeners do not ask for one.
func (c *cluster) tlsArgs(m *member) []string {
	f := c.tlsFiles(m)
	server := func(prefix string) []string {
		return []string{"--" + prefix + "tls-cert-file", f.cert, "--" + prefix + "tls-key-file", f.key,
			"--" + prefix + "tls-trust-certs-file", f.trust, "--" + prefix + "tls-require-client-cert"}
	}
	client := func(prefix string) []string {
		return []string{"--" + prefix + "-tls-trust-certs-file", f.trust, "--" + prefix + "-tls-cert-file", f.cert,
			"--" + prefix + "-tls-key-file", f.key}
	}
	switch m.Role {
	case "metadata":
		return append(server(""), server("peer-")...)
	case "bookie":
		return append(server(""), client("metadata")...)
	default:
		args := append(client("metadata"), client("bookie")...)
		return append(args, "--tls-addr", m.TLSAddr, "--https-addr", m.HTTPSAddr,
			"--tls-cert-file", f.cert, "--tls-key-file", f.key)
	}
}
