package apiserver

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// The OpenAPI 3 document is served at /v3/openapi.json, without a key.
func TestOpenAPI3Served(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	resp, err := http.Get(h.base + "/v3/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(b, cpv1.OpenAPI3) {
		t.Fatalf("GET /v3/openapi.json: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
	}
}
