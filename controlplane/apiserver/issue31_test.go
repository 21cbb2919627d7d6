package apiserver

import (
	"fmt"
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
