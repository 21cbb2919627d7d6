package issuer

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/magnetar-dev/magnetar/controlplane/store"
	"github.com/magnetar-dev/magnetar/controlplane/store/sqlstore"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

func kids(t *testing.T, i *Issuer) []string {
	t.Helper()
	set, err := i.JWKS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range set.Keys {
		out = append(out, k.KeyID)
	}
	return out
}

func TestIssueVerifyAndClaims(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []string{"ES256", "RS256"} {
		t.Run(alg, func(t *testing.T) {
			i, err := New(Config{Store: openStore(t), URL: "http://cp.example:7080/", Alg: alg})
			if err != nil {
				t.Fatal(err)
			}
			tok, err := i.Issue(ctx, "organizations:acme:serviceAccounts:ci", "urn:magnetar:cluster:acme/prod", "uid1")
			if err != nil {
				t.Fatal(err)
			}
			c, err := i.Verify(ctx, tok)
			if err != nil {
				t.Fatal(err)
			}
			if c.Subject != "organizations:acme:serviceAccounts:ci" || c.ClientID != "uid1" || c.Audience != "urn:magnetar:cluster:acme/prod" {
				t.Fatalf("claims %+v", c)
			}
			if ttl := time.Until(c.Expires); ttl <= 0 || ttl > DefaultTokenTTL {
				t.Fatalf("token lives %v, want at most %v", ttl, DefaultTokenTTL)
			}
			parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
			if err != nil {
				t.Fatal(err)
			}
			mc := parsed.Claims.(jwt.MapClaims)
			if parsed.Method.Alg() != alg || parsed.Header["typ"] != "at+jwt" || mc["iss"] != "http://cp.example:7080" || mc["jti"] == "" || mc["iat"] == nil {
				t.Fatalf("header %v claims %v", parsed.Header, mc)
			}
			if got := kids(t, i); len(got) != 1 || got[0] != parsed.Header["kid"] {
				t.Fatalf("JWKS kids %v, token kid %v", got, parsed.Header["kid"])
			}
		})
	}
}

func TestKeysAreSharedAndDurable(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	a, _ := New(Config{Store: st, URL: "http://cp"})
	b, _ := New(Config{Store: st, URL: "http://cp"}) // another replica, or a restart
	tok, err := a.Issue(ctx, "r", "aud", "uid")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Verify(ctx, tok); err != nil {
		t.Fatalf("replica b refuses replica a's token: %v", err)
	}
	tok2, _ := b.Issue(ctx, "r", "aud", "uid")
	p1, _, _ := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	p2, _, _ := jwt.NewParser().ParseUnverified(tok2, jwt.MapClaims{})
	if p1.Header["kid"] != p2.Header["kid"] {
		t.Fatalf("replicas sign with different keys: %v and %v", p1.Header["kid"], p2.Header["kid"])
	}
	other, _ := New(Config{Store: openStore(t), URL: "http://cp"})
	if _, err := other.Verify(ctx, tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("an issuer with other keys accepted the token: %v", err)
	}
	wrongIss, _ := New(Config{Store: st, URL: "http://elsewhere"})
	if _, err := wrongIss.Verify(ctx, tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a token of issuer http://cp verified as http://elsewhere's: %v", err)
	}
}

func TestRotationAndGrace(t *testing.T) {
	ctx := context.Background()
	var c clock
	i, err := New(Config{Store: openStore(t), URL: "http://cp", Rotation: time.Hour, Grace: 10 * time.Minute, TokenTTL: time.Minute, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := i.Issue(ctx, "r", "aud", "uid")
	first := kids(t, i)
	c.advance(61 * time.Minute)
	if _, err := i.Issue(ctx, "r", "aud", "uid"); err != nil {
		t.Fatal(err)
	}
	both := kids(t, i)
	if len(both) != 2 || both[0] != first[0] {
		t.Fatalf("after rotation JWKS has %v, want the old %v and a new key", both, first)
	}
	c.advance(5 * time.Minute)
	if len(kids(t, i)) != 2 {
		t.Fatal("the replaced key left the JWKS before its grace ended")
	}
	c.advance(6 * time.Minute)
	if got := kids(t, i); len(got) != 1 || got[0] != both[1] {
		t.Fatalf("after the grace JWKS has %v, want only %v", got, both[1])
	}
	if _, err := i.Verify(ctx, old); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("a token of the retired key verified: %v", err)
	}
	if err := i.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kids(t, i); len(got) != 2 {
		t.Fatalf("Rotate: JWKS has %v, want two keys", got)
	}
}

func TestAudienceAndRoleNames(t *testing.T) {
	if a := ClusterAudience("organizations/acme/clusters/prod"); a != "urn:magnetar:cluster:acme/prod" {
		t.Fatalf("ClusterAudience = %q", a)
	}
	if a := OrganizationAudience("organizations/acme"); a != "urn:magnetar:organization:acme" {
		t.Fatalf("OrganizationAudience = %q", a)
	}
	// Each inverse: the resource an audience names, "" for none.
	for _, c := range []struct {
		name  string
		parse func(string) (string, bool)
		cases map[string]string
	}{
		{"ClusterOfAudience", ClusterOfAudience, map[string]string{
			"urn:magnetar:cluster:acme/prod": "organizations/acme/clusters/prod",
			"urn:magnetar:cluster:acme":      "",
			"urn:magnetar:cluster:a/b/c":     "",
			"urn:magnetar:organization:acme": "",
			"http://cp":                      "",
		}},
		{"OrganizationOfAudience", OrganizationOfAudience, map[string]string{
			"urn:magnetar:organization:acme":   "organizations/acme",
			"urn:magnetar:organization:":       "",
			"urn:magnetar:organization:acme/x": "",
			"urn:magnetar:cluster:acme/prod":   "",
		}},
	} {
		for aud, want := range c.cases {
			got, ok := c.parse(aud)
			if got != want || ok != (want != "") {
				t.Errorf("%s(%q) = %q %v, want %q", c.name, aud, got, ok, want)
			}
		}
	}
	if r := Role("organizations/acme/serviceAccounts/ci"); r != "organizations:acme:serviceAccounts:ci" || Principal(r) != "organizations/acme/serviceAccounts/ci" {
		t.Fatalf("Role = %q", r)
	}
}
