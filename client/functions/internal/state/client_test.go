package state

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeWorker is an in-memory state API that checks the bearer token.
type fakeWorker struct {
	t      *testing.T
	token  string
	mu     sync.Mutex
	state  map[string][]byte
	counts map[string]int64
	paths  []string // escaped paths seen
}

const prefix = "/magnetar/v1/functions/"

func (f *fakeWorker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths = append(f.paths, r.Method+" "+r.URL.EscapedPath())
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"reason":"bad token"}`)
		return
	}
	// tenant/namespace/name/kind/key, each escaped.
	parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), prefix), "/")
	if len(parts) != 5 {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	if parts[0] != "ten%20ant" || parts[1] != "ns" || parts[2] != "fn" {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"reason":"function does not exist"}`)
		return
	}
	key := parts[4]
	switch kind := parts[3]; {
	case kind == "state" && r.Method == http.MethodGet:
		v, ok := f.state[key]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Write(v)
	case kind == "state" && r.Method == http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		if key == "fail" {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"reason":"disk on fire"}`)
			return
		}
		f.state[key] = b
		w.WriteHeader(http.StatusNoContent)
	case kind == "state" && r.Method == http.MethodDelete:
		if _, ok := f.state[key]; !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		delete(f.state, key)
		w.WriteHeader(http.StatusNoContent)
	case kind == "counter" && r.Method == http.MethodPost:
		var body struct {
			Delta *int64 `json:"delta"`
		}
		if json.NewDecoder(r.Body).Decode(&body) != nil || body.Delta == nil || r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"reason":"bad body"}`)
			return
		}
		f.counts[key] += *body.Delta
		json.NewEncoder(w).Encode(map[string]int64{"value": f.counts[key]})
	case kind == "counter" && r.Method == http.MethodGet:
		json.NewEncoder(w).Encode(map[string]int64{"value": f.counts[key]})
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		io.WriteString(w, "plain text\nsecond line")
	}
}

func newFake(t *testing.T, token string) (*fakeWorker, *httptest.Server) {
	f := &fakeWorker{t: t, token: token, state: map[string][]byte{}, counts: map[string]int64{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func TestClientAgainstWorker(t *testing.T) {
	ctx := context.Background()
	f, srv := newFake(t, "tok")
	c := New(Config{BaseURL: srv.URL + "/", Tenant: "ten ant", Namespace: "ns", Name: "fn",
		Token: func() (string, error) { return "tok", nil }})

	if v, err := c.Get(ctx, "absent"); v != nil || err != nil {
		t.Fatalf("Get(absent) = %q, %v; want nil, nil", v, err)
	}
	if err := c.Put(ctx, "a/b c", []byte("value")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "a/b c"); string(v) != "value" || err != nil {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if err := c.Put(ctx, "empty", []byte{}); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "empty"); v == nil || len(v) != 0 || err != nil {
		t.Fatalf("Get(empty) = %#v, %v; want a non-nil empty slice", v, err)
	}
	if err := c.Delete(ctx, "a/b c"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "a/b c"); err != nil {
		t.Fatalf("deleting an absent key: %v", err)
	}
	if n, err := c.Counter(ctx, "hits"); n != 0 || err != nil {
		t.Fatalf("Counter(new) = %d, %v", n, err)
	}
	for _, d := range []int64{5, -2} {
		if _, err := c.Incr(ctx, "hits", d); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.Incr(ctx, "hits", 0); n != 3 || err != nil {
		t.Fatalf("Incr = %d, %v; want 3", n, err)
	}
	if n, err := c.Counter(ctx, "hits"); n != 3 || err != nil {
		t.Fatalf("Counter = %d, %v; want 3", n, err)
	}
	// Keys are one escaped path segment.
	if want := "PUT " + prefix + "ten%20ant/ns/fn/state/a%2Fb%20c"; f.paths[1] != want {
		t.Errorf("path %q, want %q", f.paths[1], want)
	}

	err := c.Put(ctx, "fail", []byte("x"))
	var se *Error
	if !errors.As(err, &se) || se.StatusCode != 500 || se.Reason != "disk on fire" || se.Op != "put state" || se.Key != "fail" {
		t.Fatalf("Put(fail) = %v, want a 500 *Error with the reason", err)
	}
	if !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("error text %q lacks the reason", err)
	}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	_, srv := newFake(t, "tok")

	bad := New(Config{BaseURL: srv.URL, Tenant: "ten ant", Namespace: "ns", Name: "fn",
		Token: func() (string, error) { return "wrong", nil }})
	var se *Error
	if _, err := bad.Counter(ctx, "k"); !errors.As(err, &se) || se.StatusCode != 401 || se.Reason != "bad token" {
		t.Errorf("wrong token: %v", err)
	}
	noToken := New(Config{BaseURL: srv.URL, Tenant: "ten ant", Namespace: "ns", Name: "fn",
		Token: func() (string, error) { return "", errors.New("token file gone") }})
	if err := noToken.Put(ctx, "k", nil); err == nil || !strings.Contains(err.Error(), "token file gone") {
		t.Errorf("failing token source: %v", err)
	}
	other := New(Config{BaseURL: srv.URL, Tenant: "t", Namespace: "ns", Name: "other",
		Token: func() (string, error) { return "tok", nil }})
	if _, err := other.Counter(ctx, "k"); !errors.As(err, &se) || se.StatusCode != 404 || se.Reason != "function does not exist" {
		t.Errorf("unknown function: %v", err)
	}
	if err := other.Put(ctx, "", nil); err == nil || !strings.Contains(err.Error(), "empty key") {
		t.Errorf("empty key: %v", err)
	}

	for _, base := range []string{"", "  ", "bk://127.0.0.1:4181", "etcd:http://x", "http://"} {
		c := New(Config{BaseURL: base, Tenant: "t", Namespace: "n", Name: "f"})
		_, err := c.Get(ctx, "k")
		if !errors.Is(err, ErrNotConfigured) || !strings.Contains(err.Error(), "state storage is not configured for this worker") {
			t.Errorf("base %q: %v", base, err)
		}
	}
}

func TestReason(t *testing.T) {
	for body, want := range map[string]string{
		`{"reason":"why"}`:             "why",
		"plain text\nsecond line":      "plain text",
		`{"message":"not our format"}`: `{"message":"not our format"}`,
		"":                             "",
	} {
		if got := reason(strings.NewReader(body)); got != want {
			t.Errorf("reason(%q) = %q, want %q", body, got, want)
		}
	}
}
