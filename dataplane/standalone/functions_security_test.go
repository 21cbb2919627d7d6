package standalone_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"
)

// createFunctionAs posts a Go-runtime function (a shell script: only the
// create's authorization matters here) with a role's token.
func (sc *secured) createFunctionAs(t *testing.T, token, tenant, ns, name string, inputs []string, output string) (int, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	cfg, _ := json.Marshal(map[string]any{"runtime": "GO", "inputs": inputs, "output": output})
	mw.WriteField("functionConfig", string(cfg))
	fw, _ := mw.CreateFormFile("data", "fn")
	fw.Write([]byte("#!/bin/sh\nsleep 60\n"))
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, sc.s.WebServiceURL()+"/admin/v3/functions/"+tenant+"/"+ns+"/"+name, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return do(t, req)
}

// TestFunctionsAuthorization: a tenant's admin deploys functions in its
// tenant over its own topics, and is refused another tenant's topics and
// functions; no credentials, no functions API.
func TestFunctionsAuthorization(t *testing.T) {
	sc := startSecured(t)
	adminTok := sc.token(t, "admin", time.Hour)
	for _, step := range []struct{ method, path, body string }{
		{http.MethodPut, "/admin/v2/tenants/acme", `{"adminRoles":["acme-admin"],"allowedClusters":["standalone"]}`},
		{http.MethodPut, "/admin/v2/namespaces/acme/orders", ""},
		{http.MethodPut, "/admin/v2/tenants/globex", `{"adminRoles":["globex-admin"],"allowedClusters":["standalone"]}`},
		{http.MethodPut, "/admin/v2/namespaces/globex/secret", ""},
	} {
		if code, body := sc.admin(t, step.method, step.path, adminTok, step.body); code/100 != 2 {
			t.Fatalf("%s %s: %d %s", step.method, step.path, code, body)
		}
	}
	acme := sc.token(t, "acme-admin", time.Hour)
	if code, body := sc.createFunctionAs(t, "", "acme", "orders", "f0", []string{"persistent://acme/orders/in"}, ""); code != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d %s", code, body)
	}
	if code, body := sc.createFunctionAs(t, acme, "acme", "orders", "own", []string{"persistent://acme/orders/in"}, "persistent://acme/orders/out"); code != http.StatusNoContent {
		t.Fatalf("tenant admin over its own topics: %d %s", code, body)
	}
	if code, body := sc.createFunctionAs(t, acme, "acme", "orders", "steal", []string{"persistent://globex/secret/in"}, "persistent://acme/orders/out"); code != http.StatusForbidden || !strings.Contains(body, "globex/secret") {
		t.Fatalf("reading another tenant's topic: %d %s", code, body)
	}
	if code, body := sc.createFunctionAs(t, acme, "acme", "orders", "leak", []string{"persistent://acme/orders/in"}, "persistent://globex/secret/out"); code != http.StatusForbidden {
		t.Fatalf("writing another tenant's topic: %d %s", code, body)
	}
	if code, body := sc.createFunctionAs(t, acme, "globex", "secret", "f1", []string{"persistent://globex/secret/in"}, ""); code != http.StatusForbidden {
		t.Fatalf("creating in another tenant: %d %s", code, body)
	}
	if code, body := sc.admin(t, http.MethodGet, "/admin/v3/functions/globex/secret", acme, ""); code != http.StatusForbidden {
		t.Fatalf("listing another tenant's functions: %d %s", code, body)
	}
	if code, body := sc.admin(t, http.MethodGet, "/admin/v3/functions/acme/orders", acme, ""); code != http.StatusOK || !strings.Contains(body, "own") {
		t.Fatalf("listing its own functions: %d %s", code, body)
	}
	// The connector catalogue is open to any authenticated role; the
	// worker's own endpoints are a superuser's.
	app := sc.token(t, "app", time.Hour)
	if code, body := sc.admin(t, http.MethodGet, "/admin/v3/sources/builtinsources", app, ""); code != http.StatusOK {
		t.Fatalf("builtin sources: %d %s", code, body)
	}
	if code, body := sc.admin(t, http.MethodGet, "/admin/v2/worker/cluster", app, ""); code != http.StatusForbidden {
		t.Fatalf("worker cluster as a plain role: %d %s", code, body)
	}
	if code, body := sc.admin(t, http.MethodDelete, "/admin/v3/functions/acme/orders/own", acme, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", code, body)
	}
}
