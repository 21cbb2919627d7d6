package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Key files follow `pulsar tokens`: a secret key is its raw bytes (or, as
// Pulsar's "data:;base64," form and `--base64` output, base64 text); a key
// pair is a PKCS#8 private key and an X.509 SubjectPublicKeyInfo public key,
// each DER or PEM.

// ReadSecretKey reads a secret key file.
func ReadSecretKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: secret key: %w", err)
	}
	return ParseSecretKey(b)
}

// ParseSecretKey accepts raw bytes (32 or more) or "data:;base64,<b64>".
func ParseSecretKey(b []byte) ([]byte, error) {
	s := strings.TrimSpace(string(b))
	if rest, ok := strings.CutPrefix(s, "data:;base64,"); ok {
		k, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("auth: secret key: %w", err)
		}
		return k, nil
	}
	if len(b) < 32 {
		return nil, errors.New("auth: secret key is shorter than 32 bytes")
	}
	return b, nil
}

// ReadPublicKey reads an RSA or EC public key (DER or PEM, PKIX).
func ReadPublicKey(path string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: public key: %w", err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	k, err := x509.ParsePKIXPublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("auth: public key %s: %w", path, err)
	}
	return k, nil
}

// ReadPrivateKey reads a PKCS#8 (or PKCS#1 RSA / SEC 1 EC) private key,
// DER or PEM.
func ReadPrivateKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: private key: %w", err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		b = blk.Bytes
	}
	if k, err := x509.ParsePKCS8PrivateKey(b); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParsePKCS1PrivateKey(b); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(b); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("auth: %s is not a PKCS#8, PKCS#1 or SEC 1 private key", path)
}

// NewSecretKey returns 32 random bytes (an HS256 key).
func NewSecretKey() ([]byte, error) {
	k := make([]byte, 32)
	_, err := rand.Read(k)
	return k, err
}

// NewKeyPair returns a private key and its public key, DER-encoded (PKCS#8
// and PKIX). alg is RS256 (2048-bit RSA) or ES256 (P-256).
func NewKeyPair(alg string) (private, public []byte, err error) {
	var k crypto.Signer
	switch alg {
	case "RS256":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		return nil, nil, fmt.Errorf("auth: unsupported key algorithm %q (RS256 or ES256)", alg)
	}
	if err != nil {
		return nil, nil, err
	}
	if private, err = x509.MarshalPKCS8PrivateKey(k); err != nil {
		return nil, nil, err
	}
	if public, err = x509.MarshalPKIXPublicKey(k.Public()); err != nil {
		return nil, nil, err
	}
	return private, public, nil
}
