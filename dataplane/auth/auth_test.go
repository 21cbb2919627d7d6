package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestTokenProvider(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	hs, err := NewTokenProvider(TokenConfig{SecretKey: secret, Audience: "cluster-a", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(o MintOptions) string {
		if o.Now.IsZero() {
			o.Now = now
		}
		tok, err := Mint(secret, o)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "x", "aud": "cluster-a"}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	other, _ := Mint([]byte("another-key-another-key-another-key!"), MintOptions{Subject: "x", Audience: "cluster-a"})
	nbf, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "aud": "cluster-a", "nbf": now.Add(time.Hour).Unix()}).SignedString(secret)
	for _, tc := range []struct {
		name, tok, role, reason string
	}{
		{"valid", mint(MintOptions{Subject: "app", Audience: "cluster-a", Expiry: time.Hour}), "app", ""},
		{"expired", mint(MintOptions{Subject: "app", Audience: "cluster-a", Expiry: time.Hour, Now: now.Add(-2 * time.Hour)}), "", "token expired"},
		{"not yet valid", nbf, "", "not valid yet"},
		{"wrong audience", mint(MintOptions{Subject: "app", Audience: "cluster-b"}), "", "audience"},
		{"no audience", mint(MintOptions{Subject: "app"}), "", "audience"},
		{"alg none", none, "", "invalid"},
		{"bad signature", other, "", "signature is invalid"},
		{"garbage", "abc.def", "", "malformed"},
		{"empty", "", "", "empty token"},
		{"oversized", strings.Repeat("x", DefaultMaxTokenSize+1), "", "limit"},
	} {
		id, err := hs.Authenticate(context.Background(), Credentials{Method: MethodToken, Data: []byte(tc.tok)})
		switch {
		case tc.reason == "" && (err != nil || id.Role != tc.role):
			t.Errorf("%s: %v %+v", tc.name, err, id)
		case tc.reason != "" && (err == nil || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.reason)):
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.reason)
		}
	}
}

func TestTokenProviderKeyPairs(t *testing.T) {
	for _, alg := range []string{"RS256", "ES256"} {
		privDER, pubDER, err := NewKeyPair(alg)
		if err != nil {
			t.Fatal(err)
		}
		priv, _ := x509.ParsePKCS8PrivateKey(privDER)
		pub, _ := x509.ParsePKIXPublicKey(pubDER)
		p, err := NewTokenProvider(TokenConfig{PublicKey: pub, RoleClaim: "role"})
		if err != nil {
			t.Fatal(err)
		}
		var key any = priv
		switch k := priv.(type) {
		case *rsa.PrivateKey:
			key = k
		case *ecdsa.PrivateKey:
			key = k
		}
		tok, err := Mint(key, MintOptions{Subject: "svc", RoleClaim: "role"})
		if err != nil {
			t.Fatal(err)
		}
		if id, err := p.Authenticate(context.Background(), Credentials{Data: []byte(tok)}); err != nil || id.Role != "svc" {
			t.Fatalf("%s: %v %+v", alg, err, id)
		}
		// An HS256 token made with the public key's bytes (the classic
		// algorithm-confusion attack) is refused.
		forged, _ := Mint(pubDER, MintOptions{Subject: "svc", RoleClaim: "role"})
		if _, err := p.Authenticate(context.Background(), Credentials{Data: []byte(forged)}); err == nil {
			t.Fatalf("%s: HS256 token signed with the public key accepted", alg)
		}
	}
}

// TestBasicProvider checks our apr1-MD5 against OpenSSL's, an independent
// implementation, and bcrypt/SHA entries.
func TestBasicProvider(t *testing.T) {
	out, err := exec.Command("openssl", "passwd", "-apr1", "-salt", "s4lt", "s3cret").Output()
	if err != nil {
		t.Skip("openssl not available:", err)
	}
	p, err := ParseHtpasswd([]byte("# users\nalice:" + strings.TrimSpace(string(out)) + "\nbob:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		data string
		ok   bool
	}{
		{"alice:s3cret", true}, {"alice:wrong", false}, {"bob:password", true}, {"carol:x", false}, {"nocolon", false},
	} {
		id, err := p.Authenticate(context.Background(), Credentials{Method: MethodBasic, Data: []byte(tc.data)})
		if (err == nil) != tc.ok || (tc.ok && id.Role != strings.Split(tc.data, ":")[0]) {
			t.Errorf("%q: %v %+v", tc.data, err, id)
		}
	}
}

func TestAuthenticatorDispatch(t *testing.T) {
	hs, _ := NewTokenProvider(TokenConfig{SecretKey: []byte("0123456789abcdef0123456789abcdef")})
	strict, _ := NewAuthenticator("", hs)
	if _, err := strict.Authenticate(context.Background(), Credentials{}); err == nil {
		t.Fatal("no credentials accepted without an anonymous role")
	}
	if _, err := strict.Authenticate(context.Background(), Credentials{Method: "athenz", Data: []byte("x")}); err == nil || !strings.Contains(err.Error(), "not enabled") {
		t.Fatalf("unknown method: %v", err)
	}
	open, _ := NewAuthenticator("anonymous", hs)
	if id, err := open.Authenticate(context.Background(), Credentials{}); err != nil || id.Role != "anonymous" {
		t.Fatalf("anonymous: %v %+v", err, id)
	}
}

func TestIsSuperuserPrefix(t *testing.T) {
	a := NewAuthorizer(nil, []string{"admin", "operators:*"})
	for role, want := range map[string]bool{"admin": true, "operators:bootstrap": true, "operators": false, "adminx": false, "organizations:acme:serviceAccounts:x": false} {
		if got := a.IsSuperuser(role); got != want {
			t.Errorf("IsSuperuser(%q) = %v, want %v", role, got, want)
		}
	}
}
