package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Issue 31: unknown JSON fields are refused naming the field; listing the
// children of a missing parent is NOT_FOUND naming the parent.
func TestIssue31UnknownFieldsAndMissingParent(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	a := h.setup("alpha")[0]
	code, body := h.rest(a.key, "POST", "/v1/"+a.org+"/clusters?clusterId=c1", map[string]any{"region": "regions/us-east", "brokers": 3})
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), `"brokers"`) {
		t.Fatalf("unknown field: %d %v", code, body)
	}
	code, body = h.rest(a.key, "GET", "/v1/"+a.org+"/clusters/nope/tenants", nil)
	if code != http.StatusNotFound || !strings.Contains(fmt.Sprint(body["message"]), a.org+"/clusters/nope") {
		t.Fatalf("list under a missing parent: %d %v", code, body)
	}
	code, body = h.rest(h.opKey, "GET", "/v1/organizations/ghost/clusters", nil)
	if code != http.StatusNotFound || !strings.Contains(fmt.Sprint(body["message"]), "organizations/ghost") {
		t.Fatalf("list under a missing organization: %d %v", code, body)
	}
}

// Issue 31: an oversized body is 413 before it is parsed; malformed JSON
// is said to be the request body's; a verb a path does not have is 405.
func TestIssue31BodyAndRouting(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	a := h.setup("beta")[0]
	raw := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, h.base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+a.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	big := `{"displayName":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	if code, body := raw("POST", "/v1/organizations?organizationId=big", big); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "limit") {
		t.Fatalf("oversized body: %d %.200s", code, body)
	}
	if code, body := raw("PATCH", "/v1/"+a.org, `{"displayName":`); code != http.StatusBadRequest || !strings.Contains(body, "request body is not valid JSON") {
		t.Fatalf("malformed JSON: %d %s", code, body)
	}
	if code, body := raw("PUT", "/v1/organizations", `{}`); code != http.StatusMethodNotAllowed || !strings.Contains(body, "not allowed") {
		t.Fatalf("PUT on a collection: %d %s", code, body)
	}
	if code, body := raw("GET", "/v1/nothing/here/at/all/x/y/z", ""); code != http.StatusNotFound {
		t.Fatalf("unknown path: %d %s", code, body)
	}
}
