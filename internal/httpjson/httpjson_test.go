package httpjson

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestGetIfChanged: the document and its ETag on the first fetch, 304
// without touching v on the next, the new document once it changed;
// errors for a non-200 answer and an oversized document.
func TestGetIfChanged(t *testing.T) {
	body, tag := `{"n":1}`, `"v1"`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/missing":
			http.Error(w, "no", http.StatusNotFound)
		case r.Header.Get("If-None-Match") == tag:
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("ETag", tag)
			w.Write([]byte(body))
		}
	}))
	defer srv.Close()
	ctx, hc := t.Context(), srv.Client()
	var v struct{ N int }
	got, changed, err := GetIfChanged(ctx, hc, srv.URL, "", 1<<10, &v)
	if err != nil || !changed || got != `"v1"` || v.N != 1 {
		t.Fatalf("first fetch: %q %v %v %+v", got, changed, err, v)
	}
	v.N = 0
	if got, changed, err = GetIfChanged(ctx, hc, srv.URL, got, 1<<10, &v); err != nil || changed || got != `"v1"` || v.N != 0 {
		t.Fatalf("unchanged: %q %v %v %+v", got, changed, err, v)
	}
	body, tag = `{"n":2}`, `"v2"`
	if got, changed, err = GetIfChanged(ctx, hc, srv.URL, got, 1<<10, &v); err != nil || !changed || got != `"v2"` || v.N != 2 {
		t.Fatalf("changed: %q %v %v %+v", got, changed, err, v)
	}
	if err := Get(ctx, hc, srv.URL+"/missing", 1<<10, &v); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("404: %v", err)
	}
	if err := Get(ctx, hc, srv.URL, 3, &v); err == nil || !strings.Contains(err.Error(), "over 3 bytes") {
		t.Fatalf("oversized: %v", err)
	}
}
