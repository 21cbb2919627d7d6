package apiserver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
)

// postToken sends a token request: form fields, and HTTP Basic when
// basic is not nil. It returns the status and the JSON answer.
func (h *harness) postToken(form url.Values, basic []string, contentType string) (int, map[string]any) {
	h.t.Helper()
	req, _ := http.NewRequest("POST", h.base+issuer.TokenPath, strings.NewReader(form.Encode()))
	if contentType == "" {
		contentType = "application/x-www-form-urlencoded"
	}
	req.Header.Set("Content-Type", contentType)
	if basic != nil {
		req.SetBasicAuth(url.QueryEscape(basic[0]), url.QueryEscape(basic[1]))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		h.t.Errorf("token response Cache-Control %q, want no-store", cc)
	}
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		h.t.Fatalf("token endpoint answered %d %q: %v", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, out
}

func ccForm(id, secret, aud string) url.Values {
	v := url.Values{"grant_type": {"client_credentials"}}
	if id != "" {
		v.Set("client_id", id)
	}
	if secret != "" {
		v.Set("client_secret", secret)
	}
	if aud != "" {
		v.Set("audience", aud)
	}
	return v
}

func TestOAuthIssuer(t *testing.T) {
	h := newHarness(t, "sqlite://"+filepath.Join(t.TempDir(), "cp.db"))
	op := h.authCtx(h.opKey)
	tenants := h.setup("acme", "globex")
	acme, globex := tenants[0], tenants[1]
	sa := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(op, &cpv1.CreateServiceAccountRequest{Parent: acme.org, ServiceAccountId: "app"}))
	must[*cpv1.RoleBinding](t)(h.rbs.CreateRoleBinding(op, &cpv1.CreateRoleBindingRequest{Parent: acme.org, RoleBindingId: "app-viewer",
		RoleBinding: &cpv1.RoleBinding{Role: "roles/viewer", Member: sa.Name, Resource: acme.org}}))
	key := must[*cpv1.ApiKey](t)(h.sas.CreateApiKey(op, &cpv1.CreateApiKeyRequest{Parent: sa.Name, ApiKeyId: "k1"}))
	prod := h.readyCluster(acme, "prod", "regions/us-east")
	globexCluster := h.readyCluster(globex, "main", "regions/eu-west")

	// Discovery names this server's endpoints under its issuer URL.
	iss := "http://" + h.srv.Addr().String()
	if h.srv.IssuerURL() != iss {
		t.Fatalf("issuer URL %q, want %q", h.srv.IssuerURL(), iss)
	}
	for _, p := range []string{issuer.DiscoveryPath, issuer.MetadataPath} {
		code, doc := h.rest("", "GET", p, nil)
		if code != 200 || doc["issuer"] != iss || doc["token_endpoint"] != iss+issuer.TokenPath || doc["jwks_uri"] != iss+issuer.JWKSPath {
			t.Fatalf("GET %s: %d %v", p, code, doc)
		}
	}

	// Client credentials in the form (client_id: the key's uid) and with
	// HTTP Basic (client_id: the key's name).
	code, resp := h.postToken(ccForm(key.Uid, key.Secret, issuer.ClusterAudience(prod)), nil, "")
	if code != 200 || resp["token_type"] != "Bearer" || resp["expires_in"] != float64(expiresIn(h.srv.issuer.TokenTTL())) || expiresIn(h.srv.issuer.TokenTTL()) != 3240 {
		t.Fatalf("token (form): %d %v", code, resp)
	}
	tok := resp["access_token"].(string)
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok, claims); err != nil {
		t.Fatal(err)
	}
	if claims["sub"] != "organizations:acme:serviceAccounts:app" || claims["aud"] != "urn:magnetar:cluster:acme/prod" || claims["iss"] != iss || claims["client_id"] != key.Uid {
		t.Fatalf("claims %v", claims)
	}
	// The organization's audience, valid on every cluster of it.
	code, resp = h.postToken(ccForm(key.Uid, key.Secret, issuer.OrganizationAudience(acme.org)), nil, "")
	if code != 200 {
		t.Fatalf("token for the organization's audience: %d %v", code, resp)
	}
	if c, err := h.srv.issuer.Verify(t.Context(), resp["access_token"].(string)); err != nil || c.Audience != "urn:magnetar:organization:acme" || c.Subject != "organizations:acme:serviceAccounts:app" {
		t.Fatalf("organization token: %+v %v", c, err)
	}
	code, resp = h.postToken(url.Values{"grant_type": {"client_credentials"}}, []string{key.Name, key.Secret}, "")
	if code != 200 {
		t.Fatalf("token (basic): %d %v", code, resp)
	}
	cpToken := resp["access_token"].(string)
	if c, _ := h.srv.issuer.Verify(t.Context(), cpToken); c.Audience != iss {
		t.Fatalf("default audience %q, want the issuer %q", c.Audience, iss)
	}

	// The access token is a credential of the API itself, over REST and gRPC.
	for _, tk := range []string{cpToken, tok} {
		if code, body := h.rest(tk, "GET", "/v1/"+acme.org, nil); code != 200 {
			t.Fatalf("GET organization with an access token: %d %v", code, body)
		}
	}
	must[*cpv1.ServiceAccount](t)(h.sas.GetServiceAccount(h.authCtx(cpToken), &cpv1.GetServiceAccountRequest{Name: sa.Name}))
	if code, _ := h.rest(tok[:len(tok)-4]+"AAAA", "GET", "/v1/"+acme.org, nil); code != 401 {
		t.Fatalf("a forged signature: %d, want 401", code)
	}

	// Refusals, as RFC 6749 §5.2 errors.
	for _, c := range []struct {
		name        string
		form        url.Values
		basic       []string
		contentType string
		status      int
		code        string
	}{
		{"no grant", url.Values{"client_id": {key.Uid}, "client_secret": {key.Secret}}, nil, "", 400, "invalid_request"},
		{"password grant", url.Values{"grant_type": {"password"}}, nil, "", 400, "unsupported_grant_type"},
		{"json body", ccForm(key.Uid, key.Secret, ""), nil, "application/json", 400, "invalid_request"},
		{"twice", url.Values{"grant_type": {"client_credentials", "client_credentials"}}, nil, "", 400, "invalid_request"},
		{"no secret", ccForm(key.Uid, "", ""), nil, "", 401, "invalid_client"},
		{"wrong secret", ccForm(key.Uid, key.Secret[:len(key.Secret)-2]+"xx", ""), nil, "", 401, "invalid_client"},
		{"other key's id", ccForm(strings.Split(acme.key, "_")[1], key.Secret, ""), nil, "", 401, "invalid_client"},
		{"both methods", ccForm("", key.Secret, ""), []string{key.Uid, key.Secret}, "", 400, "invalid_request"},
		{"other org's cluster", ccForm(key.Uid, key.Secret, issuer.ClusterAudience(globexCluster)), nil, "", 400, "invalid_target"},
		{"unknown cluster", ccForm(key.Uid, key.Secret, "urn:magnetar:cluster:acme/nope"), nil, "", 400, "invalid_target"},
		{"foreign audience", ccForm(key.Uid, key.Secret, "https://example.com"), nil, "", 400, "invalid_target"},
		{"other organization", ccForm(key.Uid, key.Secret, issuer.OrganizationAudience(globex.org)), nil, "", 400, "invalid_target"},
		{"unknown organization", ccForm(key.Uid, key.Secret, "urn:magnetar:organization:nope"), nil, "", 400, "invalid_target"},
		{"malformed organization", ccForm(key.Uid, key.Secret, "urn:magnetar:organization:acme/prod"), nil, "", 400, "invalid_target"},
	} {
		code, resp := h.postToken(c.form, c.basic, c.contentType)
		if code != c.status || resp["error"] != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, resp, c.status, c.code)
		}
	}
	// An operator key may ask for any organization or cluster, if it exists.
	opUID := strings.Split(h.opKey, "_")[1]
	for _, aud := range []string{issuer.ClusterAudience(globexCluster), issuer.OrganizationAudience(globex.org)} {
		if code, resp := h.postToken(ccForm(opUID, h.opKey, aud), nil, ""); code != 200 {
			t.Fatalf("operator token for %s: %d %v", aud, code, resp)
		}
	}
	if code, resp := h.postToken(ccForm(opUID, h.opKey, "urn:magnetar:organization:nope"), nil, ""); code != 400 || resp["error"] != "invalid_target" {
		t.Fatalf("operator token for an unknown organization: %d %v", code, resp)
	}

	// A revoked key gets no token, and its tokens stop working on the API
	// at once; a deleted key likewise.
	must[*cpv1.ApiKey](t)(h.sas.RevokeApiKey(op, &cpv1.RevokeApiKeyRequest{Name: key.Name}))
	if code, resp := h.postToken(ccForm(key.Uid, key.Secret, ""), nil, ""); code != 401 || resp["error"] != "invalid_client" || !strings.Contains(resp["error_description"].(string), "revoked") {
		t.Fatalf("revoked key: %d %v", code, resp)
	}
	if code, _ := h.rest(cpToken, "GET", "/v1/"+acme.org, nil); code != 401 {
		t.Fatalf("a revoked key's access token on the API: %d, want 401", code)
	}
	_, err := h.sas.GetServiceAccount(h.authCtx(cpToken), &cpv1.GetServiceAccountRequest{Name: sa.Name})
	wantCode(t, err, codes.Unauthenticated, "revoked")
	must[*emptyResp](t)(h.sas.DeleteApiKey(op, &cpv1.DeleteApiKeyRequest{Name: key.Name}))
	if code, resp := h.postToken(ccForm(key.Uid, key.Secret, ""), nil, ""); code != 401 || resp["error"] != "invalid_client" {
		t.Fatalf("deleted key: %d %v", code, resp)
	}
}

// TestOAuthRevocationList: the discovery document names the revocation
// list; a revoked key and a deleted key are on it (an active one is not),
// with an ETag that answers 304 until the list changes; an entry leaves
// once every token issued before the revocation has expired.
func TestOAuthRevocationList(t *testing.T) {
	h := newHarness(t, "sqlite://"+filepath.Join(t.TempDir(), "cp.db"))
	op := h.authCtx(h.opKey)
	acme := h.setup("acme")[0]
	sa := must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(op, &cpv1.CreateServiceAccountRequest{Parent: acme.org, ServiceAccountId: "app"}))
	keys := map[string]*cpv1.ApiKey{}
	for _, id := range []string{"active", "revoked", "deleted"} {
		keys[id] = must[*cpv1.ApiKey](t)(h.sas.CreateApiKey(op, &cpv1.CreateApiKeyRequest{Parent: sa.Name, ApiKeyId: id}))
	}
	iss := h.srv.IssuerURL()
	if code, doc := h.rest("", "GET", issuer.DiscoveryPath, nil); code != 200 || doc[issuer.DiscoveryRevokedKey] != iss+issuer.RevokedPath {
		t.Fatalf("discovery: %d %v", code, doc)
	}
	get := func(etag string) (int, []string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", iss+issuer.RevokedPath, nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct {
			ClientIDs []string `json:"client_ids"`
		}
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, doc.ClientIDs, resp.Header.Get("ETag")
	}
	code, ids, etag := get("")
	if code != 200 || len(ids) != 0 || etag == "" {
		t.Fatalf("before any revocation: %d %v etag %q", code, ids, etag)
	}
	must[*cpv1.ApiKey](t)(h.sas.RevokeApiKey(op, &cpv1.RevokeApiKeyRequest{Name: keys["revoked"].Name}))
	if _, err := h.sas.DeleteApiKey(op, &cpv1.DeleteApiKeyRequest{Name: keys["deleted"].Name}); err != nil {
		t.Fatal(err)
	}
	code, ids, etag2 := get(etag)
	want := []string{keys["revoked"].Uid, keys["deleted"].Uid}
	slices.Sort(want)
	if code != 200 || !slices.Equal(ids, want) || etag2 == etag {
		t.Fatalf("after revoking and deleting: %d %v etag %q; want %v and a new etag", code, ids, etag2, want)
	}
	if code, _, _ := get(etag2); code != http.StatusNotModified {
		t.Fatalf("unchanged list with its etag: %d, want 304", code)
	}
	// Past every token's lifetime (TokenTTL + skew) the entries leave.
	h.srv.revoked.mu.Lock()
	h.srv.revoked.now = func() time.Time { return time.Now().Add(h.srv.issuer.TokenTTL() + revocationSkew + time.Second) }
	h.srv.revoked.mu.Unlock()
	if code, ids, _ := get(""); code != 200 || len(ids) != 0 {
		t.Fatalf("after every token expired: %d %v, want an empty list", code, ids)
	}
}
