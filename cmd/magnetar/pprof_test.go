package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServePprof: the profile listener answers the index and a heap
// profile, and nothing outside /debug/pprof/.
func TestServePprof(t *testing.T) {
	srv, ln, err := servePprof("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("index: %d %.200s", code, body)
	}
	if code, body := get("/debug/pprof/heap"); code != 200 || len(body) == 0 {
		t.Fatalf("heap profile: %d, %d bytes", code, len(body))
	}
	if code, _ := get("/admin/v2/clusters"); code != 404 {
		t.Fatalf("non-profile path answered %d", code)
	}
	if _, _, err := servePprof(ln.Addr().String()); err == nil {
		t.Fatal("second listener on a taken address succeeded")
	}
}
