package apiserver

// The control plane as an OAuth2 / OpenID Connect issuer (package issuer):
// discovery, the JWKS and the token endpoint (RFC 6749 §4.4, client
// credentials), whose clients are API keys: client_id is the key's uid (or
// its resource name), client_secret the key itself ("mgk_..."), sent as
// form fields or with HTTP Basic (RFC 6749 §2.3.1). The token's sub is the
// key's principal as a data-plane role (issuer.Role); its aud is the
// audience asked for, which must be this control plane (the issuer URL,
// also the default), one of Config.TokenAudiences, the caller's
// organization (issuer.OrganizationAudience: every cluster of it) or a
// cluster of it (issuer.ClusterAudience); operators: any organization or
// cluster.
// Errors are RFC 6749 §5.2 JSON; invalid_target (RFC 8707) names an
// audience the issuer does not serve.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// maxTokenRequestBytes bounds a token request's body.
const maxTokenRequestBytes = 64 << 10

// registerOAuth adds the issuer's endpoints to mux.
func (s *Server) registerOAuth(mux *http.ServeMux) {
	mux.HandleFunc("GET "+issuer.DiscoveryPath, s.oauthDiscovery)
	mux.HandleFunc("GET "+issuer.MetadataPath, s.oauthDiscovery)
	mux.HandleFunc("GET "+issuer.JWKSPath, s.oauthJWKS)
	mux.HandleFunc("POST "+issuer.TokenPath, s.oauthToken)
	mux.HandleFunc("GET "+issuer.RevokedPath, s.oauthRevoked)
}

func writeJSONDoc(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func (s *Server) oauthDiscovery(w http.ResponseWriter, _ *http.Request) {
	writeJSONDoc(w, http.StatusOK, s.issuer.Discovery())
}

func (s *Server) oauthJWKS(w http.ResponseWriter, r *http.Request) {
	set, err := s.issuer.JWKS(r.Context())
	if err != nil {
		s.log.Error("apiserver: jwks", "err", err)
		writeJSONDoc(w, http.StatusServiceUnavailable, map[string]string{"error": "temporarily_unavailable"})
		return
	}
	w.Header().Set("Cache-Control", "max-age=60")
	writeJSONDoc(w, http.StatusOK, set)
}

// oauthError is an RFC 6749 §5.2 error response.
type oauthError struct {
	status      int
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

func oauthErr(status int, code, format string, args ...any) *oauthError {
	return &oauthError{status: status, Code: code, Description: fmt.Sprintf(format, args...)}
}

// oauthToken serves the client-credentials grant.
func (s *Server) oauthToken(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	basic := r.Header.Get("Authorization") != ""
	tok, aud, oe := s.issueToken(r)
	if oe != nil {
		if oe.status == http.StatusUnauthorized && basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="magnetar"`)
		}
		writeJSONDoc(w, oe.status, oe)
		return
	}
	s.log.Debug("apiserver: access token issued", "audience", aud)
	writeJSONDoc(w, http.StatusOK, map[string]any{
		"access_token": tok,
		"token_type":   "Bearer",
		"expires_in":   expiresIn(s.issuer.TokenTTL()),
	})
}

// expiresIn is the lifetime a token response announces: the token's, less
// a tenth (at least 1 s). Brokers challenge a connection when its token's
// exp passes; a client that counts the lifetime from when it received the
// token (the Java plugin does) would otherwise still think its token fresh
// at that moment and answer the challenge with it.
func expiresIn(ttl time.Duration) int {
	return max(1, int((ttl - max(time.Second, ttl/10)).Seconds()))
}

func (s *Server) issueToken(r *http.Request) (token, aud string, _ *oauthError) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "application/x-www-form-urlencoded" {
		return "", "", oauthErr(http.StatusBadRequest, "invalid_request", "the request body must be application/x-www-form-urlencoded")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenRequestBytes+1))
	if err != nil || len(body) > maxTokenRequestBytes {
		return "", "", oauthErr(http.StatusBadRequest, "invalid_request", "the request body is unreadable or over %d bytes", maxTokenRequestBytes)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return "", "", oauthErr(http.StatusBadRequest, "invalid_request", "malformed form body")
	}
	for k, v := range form {
		if len(v) > 1 {
			return "", "", oauthErr(http.StatusBadRequest, "invalid_request", "parameter %q is given more than once", k)
		}
	}
	switch gt := form.Get("grant_type"); gt {
	case "client_credentials":
	case "":
		return "", "", oauthErr(http.StatusBadRequest, "invalid_request", "grant_type is required")
	default:
		return "", "", oauthErr(http.StatusBadRequest, "unsupported_grant_type", "grant_type %q is not supported; use client_credentials", gt)
	}
	id, secret := form.Get("client_id"), form.Get("client_secret")
	if bid, bsecret, ok := r.BasicAuth(); ok {
		if form.Has("client_secret") {
			return "", "", oauthErr(http.StatusBadRequest, "invalid_request", "client credentials are sent both with HTTP Basic and in the body")
		}
		var err1, err2 error
		bid, err1 = url.QueryUnescape(bid)
		secret, err2 = url.QueryUnescape(bsecret)
		if err1 != nil || err2 != nil || (id != "" && id != bid) {
			return "", "", oauthErr(http.StatusUnauthorized, "invalid_client", "malformed HTTP Basic client credentials")
		}
		id = bid
	} else if r.Header.Get("Authorization") != "" {
		return "", "", oauthErr(http.StatusUnauthorized, "invalid_client", "only HTTP Basic client authentication is supported")
	}
	if id == "" || secret == "" {
		return "", "", oauthErr(http.StatusUnauthorized, "invalid_client", "client_id and client_secret (an API key) are required")
	}
	c, key, err := s.checkAPIKey(r.Context(), secret)
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			return "", "", oauthErr(http.StatusUnauthorized, "invalid_client", "%s", status.Convert(err).Message())
		}
		s.log.Error("apiserver: token endpoint", "err", err)
		return "", "", oauthErr(http.StatusInternalServerError, "server_error", "the control plane cannot check the client now")
	}
	if id != key.UID && id != key.Name {
		return "", "", oauthErr(http.StatusUnauthorized, "invalid_client", "client_id does not belong to this client_secret (use the API key's uid or name)")
	}
	s.noteHTTPPrincipal(r.Context(), c.name)
	aud, oe := s.tokenAudience(r.Context(), c, form.Get("audience"))
	if oe != nil {
		return "", "", oe
	}
	token, err = s.issuer.Issue(r.Context(), issuer.Role(c.name), aud, key.UID)
	if err != nil {
		s.log.Error("apiserver: token endpoint", "err", err)
		return "", "", oauthErr(http.StatusInternalServerError, "server_error", "the control plane cannot sign tokens now")
	}
	return token, aud, nil
}

// tokenAudience checks the audience a client asks for (see the top of
// this file); "" is the control plane itself.
func (s *Server) tokenAudience(ctx context.Context, c caller, aud string) (string, *oauthError) {
	self := s.issuer.URL()
	switch {
	case aud == "" || strings.TrimRight(aud, "/") == self:
		return self, nil
	case slices.Contains(s.cfg.TokenAudiences, aud):
		return aud, nil
	}
	refuse := oauthErr(http.StatusBadRequest, "invalid_target",
		"audience %q is neither this control plane (%s), nor your organization (%s<org>), nor a cluster of it (%s<org>/<cluster>)",
		aud, self, issuer.OrganizationAudiencePrefix, issuer.ClusterAudiencePrefix)
	k := kindCluster
	name, ok := issuer.ClusterOfAudience(aud)
	if !ok {
		k = kindOrganization
		if name, ok = issuer.OrganizationOfAudience(aud); !ok {
			return "", refuse
		}
	}
	r, err := k.parseName("audience", name)
	if err != nil || (!c.operator() && r.org != c.org) {
		return "", refuse
	}
	if _, err := s.store.Get(ctx, k.collection, name); errors.Is(err, store.ErrNotFound) {
		return "", refuse
	} else if err != nil {
		s.log.Error("apiserver: token endpoint", "err", err)
		return "", oauthErr(http.StatusInternalServerError, "server_error", "the control plane cannot check the audience now")
	}
	return aud, nil
}

// noteHTTPPrincipal records the principal of a request served outside the
// gateway for the access log.
func (s *Server) noteHTTPPrincipal(ctx context.Context, principal string) {
	if token, ok := ctx.Value(httpRequestKey{}).(string); ok {
		if v, ok := s.inflight.Load(token); ok {
			v.(*httpRequest).principal.Store(&principal)
		}
	}
}
