package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

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

// Free-text fields have length limits in characters: a longer value is 400
// naming the field and the limit, on create and on update; a value at the
// limit is accepted whatever its byte length.
func TestTextLengthLimits(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	a := h.setup("limits")[0]
	for _, c := range []struct {
		name, method, path string
		body               map[string]any
		wantCode           int
		wantMsg            string
	}{
		{"display name at the limit, 2-byte characters", "POST", "/v1/organizations?organizationId=ok1",
			map[string]any{"displayName": strings.Repeat("é", 256)}, http.StatusOK, ""},
		{"display name over the limit", "POST", "/v1/organizations?organizationId=long1",
			map[string]any{"displayName": strings.Repeat("x", 257)}, http.StatusBadRequest, "organization.display_name: at most 256 characters; got 257"},
		{"description at the limit", "POST", "/v1/" + a.org + "/serviceAccounts?serviceAccountId=ok2",
			map[string]any{"description": strings.Repeat("d", 2048)}, http.StatusOK, ""},
		{"description over the limit", "POST", "/v1/" + a.org + "/serviceAccounts?serviceAccountId=long2",
			map[string]any{"description": strings.Repeat("d", 2049)}, http.StatusBadRequest, "service_account.description: at most 2048 characters; got 2049"},
		{"update over the limit", "PATCH", "/v1/" + a.sa + "?updateMask=displayName",
			map[string]any{"displayName": strings.Repeat("y", 300)}, http.StatusBadRequest, "service_account.display_name: at most 256 characters; got 300"},
	} {
		code, body := h.rest(h.opKey, c.method, c.path, c.body)
		if code != c.wantCode || !strings.Contains(fmt.Sprint(body["message"]), c.wantMsg) {
			t.Errorf("%s: %d %v; want %d %q", c.name, code, body["message"], c.wantCode, c.wantMsg)
		}
	}
	// Nothing over the limit was stored.
	if code, _ := h.rest(h.opKey, "GET", "/v1/organizations/long1", nil); code != http.StatusNotFound {
		t.Errorf("organization with a long display name: GET %d, want 404", code)
	}
	// gRPC callers get INVALID_ARGUMENT the same way.
	_, err := h.orgs.CreateOrganization(h.authCtx(h.opKey), &cpv1.CreateOrganizationRequest{OrganizationId: "long3",
		Organization: &cpv1.Organization{DisplayName: strings.Repeat("z", 1000)}})
	wantCode(t, err, codes.InvalidArgument, "organization.display_name: at most 256 characters")
}
