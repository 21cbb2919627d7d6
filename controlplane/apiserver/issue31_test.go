package apiserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
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

// Issue 31: a cluster waiting on a region whose agent never reported says
// so in its status message; once the agent heartbeats, the message goes.
func TestIssue31ClusterNamesMissingAgent(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	a := h.setup("gamma")[0]
	h.rest(a.key, "POST", "/v1/"+a.org+"/clusters?clusterId=c1", map[string]any{"region": "regions/us-east"})
	code, body := h.rest(a.key, "GET", "/v1/"+a.org+"/clusters/c1", nil)
	if code != http.StatusOK || body["state"] != "CREATING" || !strings.Contains(fmt.Sprint(body["statusMessage"]), "agent of regions/us-east, which has never reported") {
		t.Fatalf("cluster before any heartbeat: %d %v", code, body)
	}
	code, body = h.rest(a.key, "GET", "/v1/"+a.org+"/clusters", nil)
	cls, _ := body["clusters"].([]any)
	if code != http.StatusOK || len(cls) != 1 || !strings.Contains(fmt.Sprint(cls[0].(map[string]any)["statusMessage"]), "never reported") {
		t.Fatalf("list before any heartbeat: %d %v", code, body)
	}
	if _, err := h.agent.Heartbeat(h.authCtx(h.opKey), &cpv1.HeartbeatRequest{Region: "regions/us-east"}); err != nil {
		t.Fatal(err)
	}
	if code, body = h.rest(a.key, "GET", "/v1/"+a.org+"/clusters/c1", nil); code != http.StatusOK || body["statusMessage"] != nil && body["statusMessage"] != "" {
		t.Fatalf("cluster after a heartbeat: %d %v", code, body)
	}
}

// Issue 31: a request with a body and no valid credentials is answered 401
// before its body is read: here the body never ends, and the answer still
// comes.
func TestIssue31UnauthenticatedBeforeBody(t *testing.T) {
	h := newHarness(t, "sqlite::memory:")
	h.setup("beta")
	for _, auth := range []string{"", "Bearer mgk_nope_nope"} {
		pr, pw := io.Pipe()
		go pw.Write([]byte(`{"displayName":"`)) // and never more, never closed
		req, _ := http.NewRequest("POST", h.base+"/v1/organizations?organizationId=x", pr)
		req.ContentLength = 1 << 20 // under the 4 MiB limit: only authentication can answer early
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		go func() { <-ctx.Done(); pw.CloseWithError(ctx.Err()) }() // a server that waits for the body fails the test, not hangs it
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Fatalf("authorization %q: %v", auth, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		pw.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "authorization") && !strings.Contains(string(body), "api key") {
			t.Fatalf("authorization %q: %d %s", auth, resp.StatusCode, body)
		}
	}
}
