package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPutClientReusesConnectionsAndReadsAnswers runs the W5 client against
// net/http's server: answers with and without bodies (chunked too) are read
// whole so the connection carries the next request, errors carry the
// status, and connections are reused, redialed when the server closes them.
func TestPutClientReusesConnectionsAndReadsAnswers(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
		conns atomic.Int64
	)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/conflict"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"reason":"This topic already exists"}`))
		case strings.HasSuffix(r.URL.Path, "/chunked"):
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(strings.Repeat("x", 10000))) // over the server's buffer: chunked
		case strings.HasSuffix(r.URL.Path, "/hang"):
			<-r.Context().Done() // until the client goes away
		case strings.HasSuffix(r.URL.Path, "/close"):
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()

	ctx := context.Background()
	pc := newPutClient(ts.Listener.Addr().String(), 2)
	defer pc.close()
	for _, p := range []string{"/a", "/b/chunked", "/c"} {
		if err := pc.put(ctx, p); err != nil {
			t.Fatalf("put %s: %v", p, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for three requests in turn, want 1", n)
	}
	err := pc.put(ctx, "/d/conflict")
	if err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("put to a conflict: %v, want the 409", err)
	}
	if err := pc.put(ctx, "/e"); err != nil {
		t.Fatalf("put after an error answer: %v", err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections after an error answer, want 1 (its body read, the connection kept)", n)
	}
	if err := pc.put(ctx, "/f/close"); err != nil {
		t.Fatal(err)
	}
	if err := pc.put(ctx, "/g"); err != nil {
		t.Fatalf("put after the server closed the connection: %v", err)
	}
	if n, r := conns.Load(), pc.redials.Load(); n != 2 || r != 0 {
		t.Fatalf("%d connections, %d redials, want 2 and 0 (a new one after Connection: close, not a write to the closed one)", n, r)
	}
	// The server closing idle connections behind the client's back: the
	// next put redials.
	ts.CloseClientConnections()
	if err := pc.put(ctx, "/h"); err != nil {
		t.Fatalf("put after the server dropped its idle connections: %v", err)
	}
	if r := pc.redials.Load(); r != 1 {
		t.Fatalf("%d redials after the server dropped the idle connection, want 1", r)
	}
	// A server that does not answer: the put ends with its context.
	hctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if err := pc.put(hctx, "/i/hang"); !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 10*time.Second {
		t.Fatalf("put to a server that does not answer: %v after %v, want the context's deadline", err, time.Since(t0))
	}
	mu.Lock()
	defer mu.Unlock()
	want := "PUT /a,PUT /b/chunked,PUT /c,PUT /d/conflict,PUT /e,PUT /f/close,PUT /g,PUT /h,PUT /i/hang"
	if got := strings.Join(paths, ","); got != want {
		t.Fatalf("server saw %s, want %s", got, want)
	}
}
