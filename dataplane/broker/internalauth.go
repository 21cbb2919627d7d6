package broker

// Brokers of one cluster call each other's admin API: the load manager
// asks a bundle's owner to unload or split it, and a namespace unload is
// forwarded to the owners of its bundles. With authentication on, those
// calls carry an internal credential instead of a client's: a short-lived
// HS256 token signed with a key every broker of the cluster reads from the
// metadata store (created by the first broker that needs it), sent in
// InternalTokenHeader. A valid one is a superuser; the key never leaves the
// metadata store, which only the cluster's own processes reach (mutual TLS
// in provisioned clusters), and whoever can write that store controls the
// cluster's policies anyway.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// InternalTokenHeader carries a broker's internal credential.
const InternalTokenHeader = "X-Magnetar-Broker-Token"

const (
	// internalKeyPath holds the cluster's internal signing key.
	internalKeyPath = "/admin/internal/broker-key"
	// internalAudience is the audience of internal tokens, so no other
	// token signed with a key of the same bytes could pass.
	internalAudience = "magnetar-broker-internal"
	// internalTokenTTL bounds an internal token's life: each call mints
	// its own.
	internalTokenTTL = time.Minute
	// InternalRole is the role an internal call acts as, for logs.
	InternalRole = "magnetar-broker"
)

// internalKey is the cluster's internal signing key, loaded once.
type internalKey struct {
	mu  sync.Mutex
	key []byte
}

// internalSigningKey returns the cluster's internal key, creating it in
// the metadata store when no broker has yet.
func (s *Service) internalSigningKey(ctx context.Context) ([]byte, error) {
	ik := &s.internalKey
	ik.mu.Lock()
	defer ik.mu.Unlock()
	if ik.key != nil {
		return ik.key, nil
	}
	for range 3 {
		kv, err := s.md.Get(ctx, internalKeyPath)
		if err == nil {
			if len(kv.Value) < 32 {
				return nil, fmt.Errorf("broker: internal key at %s is %d bytes, want at least 32", internalKeyPath, len(kv.Value))
			}
			ik.key = kv.Value
			return ik.key, nil
		}
		if !errors.Is(err, metadata.ErrNotFound) {
			return nil, fmt.Errorf("broker: reading the internal key: %w", err)
		}
		key := make([]byte, 32)
		rand.Read(key)
		if _, err := s.md.Create(ctx, internalKeyPath, key); err != nil && !errors.Is(err, metadata.ErrExists) {
			return nil, fmt.Errorf("broker: creating the internal key: %w", err)
		}
		// Created, or another broker won the race: read what is stored.
	}
	return nil, errors.New("broker: internal key kept changing")
}

// PeerHTTPClient is the HTTP client of calls to the cluster's other
// brokers: PeerTLS for https:// URLs, each request bounded by timeout.
func (s *Service) PeerHTTPClient() *http.Client {
	s.peerHTTPOnce.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if s.cfg.PeerTLS != nil {
			tr.TLSClientConfig = s.cfg.PeerTLS.Clone()
		}
		s.peerHTTP = &http.Client{Transport: tr, Timeout: peerCallTimeout}
	})
	return s.peerHTTP
}

// peerCallTimeout bounds a call to another broker of the cluster.
const peerCallTimeout = 30 * time.Second

// SignInternal adds this broker's internal credential to req, a call to
// another broker of the cluster. Without authentication it does nothing.
func (s *Service) SignInternal(req *http.Request) error {
	if !s.AuthEnabled() {
		return nil
	}
	key, err := s.internalSigningKey(req.Context())
	if err != nil {
		return err
	}
	now := time.Now()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   s.BrokerID(),
		Audience:  jwt.ClaimStrings{internalAudience},
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(internalTokenTTL)),
	}).SignedString(key)
	if err != nil {
		return fmt.Errorf("broker: signing an internal call: %w", err)
	}
	req.Header.Set(InternalTokenHeader, tok)
	return nil
}

// VerifyInternal checks an internal credential and returns the calling
// broker's id.
func (s *Service) VerifyInternal(ctx context.Context, tok string) (string, error) {
	key, err := s.internalSigningKey(ctx)
	if err != nil {
		return "", err
	}
	var claims jwt.RegisteredClaims
	_, err = jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithAudience(internalAudience),
		jwt.WithExpirationRequired(), jwt.WithLeeway(5*time.Second))
	if err != nil {
		return "", fmt.Errorf("invalid internal broker credential: %w", err)
	}
	return claims.Subject, nil
}
