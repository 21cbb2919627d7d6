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

// AIP-155: the same create with the same request_id returns the first
// result; the request_id with another resource id or another body is 400
// naming request_id, over REST and gRPC, for plain resources and for
// creates that return an operation, and still after the resource changed.
func TestRequestIDReuse(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	a := h.setup("reuse")[0]
	ac := h.authCtx(a.key)

	// A plain resource (the store's request ids).
	sreq := &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: "bot", RequestId: "rq-sa-1",
		ServiceAccount: &cpv1.ServiceAccount{Description: "first"}}
	first := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(ac, sreq))
	again := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(ac, sreq))
	if again.Uid != first.Uid {
		t.Fatalf("replay: %v vs %v", again, first)
	}
	other := &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: "bot", RequestId: "rq-sa-1",
		ServiceAccount: &cpv1.ServiceAccount{Description: "second"}}
	_, err := h.sas.CreateServiceAccount(ac, other)
	wantCode(t, err, codes.InvalidArgument, "request_id: already used by a different request (for "+a.org+"/serviceAccounts/bot)")
	_, err = h.sas.CreateServiceAccount(ac, &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: "bot2", RequestId: "rq-sa-1",
		ServiceAccount: &cpv1.ServiceAccount{Description: "first"}})
	wantCode(t, err, codes.InvalidArgument, "request_id: already used by a different request (for "+a.org+"/serviceAccounts/bot)")
	// The same over REST: the gateway builds the same request message.
	code, body := h.rest(a.key, "POST", "/v1/"+a.org+"/serviceAccounts?serviceAccountId=bot&requestId=rq-sa-1", map[string]any{"description": "first"})
	if code != http.StatusOK || body["uid"] != first.Uid {
		t.Fatalf("REST replay: %d %v", code, body)
	}
	code, body = h.rest(a.key, "POST", "/v1/"+a.org+"/serviceAccounts?serviceAccountId=bot&requestId=rq-sa-1", map[string]any{"description": "changed"})
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), "request_id: already used by a different request") {
		t.Fatalf("REST reuse with another body: %d %v", code, body)
	}
	// After an update the replay returns the resource as it is now, and a
	// different request is still refused.
	code, body = h.rest(a.key, "PATCH", "/v1/"+a.org+"/serviceAccounts/bot?updateMask=description", map[string]any{"description": "updated"})
	if code != http.StatusOK {
		t.Fatalf("update: %d %v", code, body)
	}
	now := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(ac, sreq))
	if now.Uid != first.Uid || now.Description != "updated" {
		t.Fatalf("replay after update: %v", now)
	}
	_, err = h.sas.CreateServiceAccount(ac, other)
	wantCode(t, err, codes.InvalidArgument, "request_id: already used by a different request")

	// A create that returns an operation.
	creq := &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "c1", RequestId: "rq-cl-1", Cluster: &cpv1.Cluster{Region: "regions/us-east", DisplayName: "one"}}
	op1 := must[*cpv1.Operation](t)(h.clusters.CreateCluster(ac, creq))
	op2 := must[*cpv1.Operation](t)(h.clusters.CreateCluster(ac, creq))
	if op1.Name != op2.Name {
		t.Fatalf("cluster replay: %s vs %s", op1.Name, op2.Name)
	}
	_, err = h.clusters.CreateCluster(ac, &cpv1.CreateClusterRequest{Parent: a.org, ClusterId: "c1", RequestId: "rq-cl-1",
		Cluster: &cpv1.Cluster{Region: "regions/us-east", DisplayName: "two"}})
	wantCode(t, err, codes.InvalidArgument, "request_id: already used by a different request (for "+a.org+"/clusters/c1)")
	code, body = h.rest(a.key, "POST", "/v1/"+a.org+"/clusters?clusterId=c2&requestId=rq-cl-1", map[string]any{"region": "regions/us-east", "displayName": "one"})
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), a.org+"/clusters/c1") {
		t.Fatalf("REST reuse for another cluster: %d %v", code, body)
	}
	code, body = h.rest(a.key, "POST", "/v1/"+a.org+"/clusters?clusterId=c1&requestId=rq-cl-1", map[string]any{"region": "regions/us-east", "displayName": "one"})
	if code != http.StatusOK || body["name"] != op1.Name {
		t.Fatalf("REST cluster replay: %d %v", code, body)
	}
}

// A 405 names the path's methods in an Allow header (RFC 9110).
func TestMethodNotAllowedAllow(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	for _, c := range []struct{ method, path, allow string }{
		{"PUT", "/v1/organizations", "GET, POST"},
		{"PUT", "/v1/organizations/acme", "DELETE, GET, PATCH"},
		{"TRACE", "/v1/organizations/acme/serviceAccounts/ci/apiKeys/k1:revoke", "POST"},
		{"DELETE", "/v1/priceBooks/pb1", "GET"},
	} {
		req, _ := http.NewRequest(c.method, h.base+c.path, nil)
		req.Header.Set("Authorization", "Bearer "+h.opKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d, Allow %q; want 405, Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.allow)
		}
	}
}
