package accesstoken

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestKeyAndTokenHelpers(t *testing.T) {
	if uid, ok := APIKeyUID("mgk_abc123_s3cret"); !ok || uid != "abc123" {
		t.Errorf("APIKeyUID: %q %v", uid, ok)
	}
	for _, bad := range []string{"nope", "mgk_", "mgk__s", "mgk_abc"} {
		if _, ok := APIKeyUID(bad); ok {
			t.Errorf("APIKeyUID accepted %q", bad)
		}
	}
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"operators:bootstrap","aud":"x"}`))
	if got := SubjectOf("h." + payload + ".s"); got != "operators:bootstrap" {
		t.Errorf("SubjectOf: %q", got)
	}
	if got := SubjectOf("garbage"); got != "" {
		t.Errorf("SubjectOf garbage: %q", got)
	}
}

func TestRefusedErrorText(t *testing.T) {
	for _, c := range []struct {
		err  RefusedError
		want string
	}{
		{RefusedError{Audience: "urn:magnetar:cluster:a/b", Status: 400, Code: "invalid_target", Description: "audience \"x\" is not yours"},
			`the control plane refused a token for urn:magnetar:cluster:a/b: invalid_target: audience "x" is not yours`},
		{RefusedError{Audience: "aud", Status: http.StatusBadGateway},
			"the control plane refused a token for aud: HTTP 502 Bad Gateway"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

// TestTokenOutlivesEndpointOutage: a token due for renewal is still handed
// out while the endpoint is unreachable and it has more than expiryMargin
// left, and no longer once it has not; a renewal that succeeds replaces it.
func TestTokenOutlivesEndpointOutage(t *testing.T) {
	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, `{"error":"temporarily_unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"fresh","token_type":"Bearer","expires_in":60}`)
	}))
	defer srv.Close()
	s := New("http://unused", "mgk_uid1_secret", WithTokenEndpoint(srv.URL))
	const aud = "urn:magnetar:cluster:a/b"
	ctx := context.Background()
	now := time.Now()

	s.byAud[aud] = cached{token: "old", renewAt: now.Add(-time.Second), expires: now.Add(time.Minute), life: 2 * time.Minute}
	if tok, err := s.Token(ctx, aud); err != nil || tok != "old" {
		t.Fatalf("renewal refused, token valid for a minute: got %q, %v; want the cached token", tok, err)
	}
	s.byAud[aud] = cached{token: "old", renewAt: now.Add(-time.Minute), expires: now.Add(expiryMargin / 2), life: 2 * time.Minute}
	var refused *RefusedError
	if tok, err := s.Token(ctx, aud); !errors.As(err, &refused) || tok != "" {
		t.Fatalf("renewal refused, token about to expire: got %q, %v; want the refusal", tok, err)
	}
	srv.Close() // unreachable now
	s.byAud[aud] = cached{token: "old", renewAt: now.Add(-time.Second), expires: now.Add(time.Minute), life: 2 * time.Minute}
	if tok, err := s.Token(ctx, aud); err != nil || tok != "old" {
		t.Fatalf("endpoint unreachable, token valid for a minute: got %q, %v; want the cached token", tok, err)
	}
	srv2 := httptest.NewServer(srv.Config.Handler)
	defer srv2.Close()
	s.fixed = srv2.URL
	up.Store(true)
	if tok, err := s.Token(ctx, aud); err != nil || tok != "fresh" {
		t.Fatalf("renewal possible: got %q, %v; want the new token", tok, err)
	}
	if c := s.byAud[aud]; !c.renewAt.After(now.Add(25*time.Second)) || !c.expires.After(now.Add(55*time.Second)) {
		t.Fatalf("new token cached with renewAt %v, expires %v", c.renewAt.Sub(now), c.expires.Sub(now))
	}
}
