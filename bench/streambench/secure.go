package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/internal/pki"
)

// secureClientRole is the role of the load generator's token on the
// secure variant: not a superuser, granted produce and consume on
// public/default once the server is up, so every lookup, producer and
// subscription goes through the authorizer.
const secureClientRole = "bench"

// secureAdminRole is the superuser role of the harness's admin calls.
const secureAdminRole = "admin"

// secureSetup is what systems "magnetar-secure" and "magnetar-tls" add to
// the standalone: a CA and a server certificate for 127.0.0.1
// (internal/pki) and, for magnetar-secure, an HS256 secret key and two
// tokens minted with it (the logic of `magnetar token`).
type secureSetup struct {
	// tlsOnly (system "magnetar-tls") serves the clients over TLS without
	// authentication or authorization: the cost of TLS alone, apart from
	// that of the tokens and the authorizer.
	tlsOnly bool

	caFile, certFile, keyFile string
	secretFile                string
	adminToken, clientToken   string
}

// authenticated reports whether the server checks tokens and grants.
func (s *secureSetup) authenticated() bool { return s != nil && !s.tlsOnly }

// prepare writes the CA, certificate, key and (unless tlsOnly) the secret
// key under dir and mints the tokens.
func (s *secureSetup) prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	ca, err := pki.Create("streambench CA", 24*time.Hour)
	if err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	leaf, err := ca.Issue("127.0.0.1", []string{"127.0.0.1", "localhost"}, 24*time.Hour)
	if err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	s.caFile = filepath.Join(dir, "ca.pem")
	s.certFile, s.keyFile = filepath.Join(dir, "broker.pem"), filepath.Join(dir, "broker-key.pem")
	s.secretFile = filepath.Join(dir, "secret.key")
	if err := os.WriteFile(s.caFile, ca.CertPEM, 0o644); err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	if err := pki.WriteLeaf(leaf, s.certFile, s.keyFile); err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	if s.tlsOnly {
		return nil
	}
	key, err := auth.NewSecretKey()
	if err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	if err := os.WriteFile(s.secretFile, key, 0o600); err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	if s.adminToken, err = auth.Mint(key, auth.MintOptions{Subject: secureAdminRole}); err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	if s.clientToken, err = auth.Mint(key, auth.MintOptions{Subject: secureClientRole}); err != nil {
		return fmt.Errorf("streambench: %w", err)
	}
	return nil
}

// args are the standalone's flags: the Pulsar protocol over TLS on
// tlsAddr and, unless tlsOnly, token authentication and authorization.
func (s *secureSetup) args(tlsAddr string) []string {
	a := []string{"--tls-addr", tlsAddr, "--tls-cert-file", s.certFile, "--tls-key-file", s.keyFile}
	if s.tlsOnly {
		return a
	}
	return append(a, "--auth-token-secret-key", s.secretFile, "--authorization", "--superuser-roles", secureAdminRole)
}
