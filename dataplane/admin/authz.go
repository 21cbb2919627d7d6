package admin

// Authentication and authorization of admin REST calls, when the broker
// has them on (broker.Config.Authenticator / Authorizer). Credentials are
// Pulsar's: "Authorization: Bearer <token>", "Authorization: Basic ...", or
// the verified client certificate on the HTTPS listener. A request without
// valid credentials is answered 401 before its body is read; one the policy
// denies 403, both with Pulsar's {"reason": ...} body. Calls from the
// cluster's other brokers carry broker.InternalTokenHeader instead and act
// as a superuser when it is valid (broker/internalauth.go).
//
// What each route needs follows Pulsar's broker: superuser for clusters,
// tenants and broker configuration writes; tenant admin for a tenant's
// namespaces and topics; lookup permission (produce or consume) for HTTP
// lookups, a topic's partitions, stats and last message id; consume for
// subscriptions and peeks; produce to post a schema. /metrics and
// /admin/v2/brokers/health stay open (probes; they reveal no tenant's data).

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// open reports the routes served without credentials.
func open(seg []string) bool {
	return (len(seg) == 1 && seg[0] == "metrics") ||
		(len(seg) == 4 && seg[0] == "admin" && seg[1] == "v2" && seg[2] == "brokers" && seg[3] == "health")
}

// check authenticates and authorizes a request; it writes the refusal and
// returns false when the request must not be served.
func (h *Handler) check(w http.ResponseWriter, r *http.Request, seg []string) (*http.Request, bool) {
	a := h.svc.Authenticator()
	if a == nil || open(seg) {
		return r, true
	}
	if tok := r.Header.Get(broker.InternalTokenHeader); tok != "" {
		// Another broker of the cluster (broker/internalauth.go): a
		// superuser when its credential is valid, refused otherwise.
		from, err := h.svc.VerifyInternal(r.Context(), tok)
		if err != nil {
			h.svc.NoteAuthenticationFailure()
			h.log.Warn("admin refused an internal call", "err", err)
			writeError(w, http.StatusUnauthorized, "Authentication failed: invalid internal broker credential")
			return r, false
		}
		h.log.Debug("admin internal call", "from", from, "method", r.Method, "path", r.URL.Path)
		return r.WithContext(auth.WithRole(r.Context(), broker.InternalRole)), true
	}
	id, err := a.AuthenticateHTTP(r)
	if err != nil {
		var ae *auth.Error
		reason := "Authentication required"
		if errors.As(err, &ae) {
			reason = "Authentication failed: " + ae.Reason
		}
		h.svc.NoteAuthenticationFailure()
		w.Header().Set("WWW-Authenticate", `Bearer realm="pulsar"`)
		writeError(w, http.StatusUnauthorized, reason)
		return r, false
	}
	r = r.WithContext(auth.WithRole(r.Context(), id.Role))
	if !h.svc.AuthzEnabled() {
		return r, true
	}
	if err := h.authorize(r, seg, id.Role); err != nil {
		var de *auth.DeniedError
		if errors.As(err, &de) {
			h.svc.NoteDenied("admin", de)
			writeError(w, http.StatusForbidden, de.Error())
		} else {
			h.log.Warn("admin authorization failed", "err", err)
			writeError(w, http.StatusServiceUnavailable, "authorization could not be decided; retry")
		}
		return r, false
	}
	return r, true
}

// authorize maps a route to the permission it needs.
func (h *Handler) authorize(r *http.Request, seg []string, role string) error {
	ctx := r.Context()
	s := h.svc
	get := r.Method == http.MethodGet
	topicOf := func(d broker.Domain, t, ns, local string) (broker.TopicName, bool) {
		tn, err := broker.ParseTopicName(string(d) + "://" + t + "/" + ns + "/" + local)
		return tn, err == nil
	}
	switch {
	case len(seg) >= 6 && seg[0] == "lookup" && seg[1] == "v2" && seg[2] == "topic":
		if tn, ok := topicOf(broker.Domain(seg[3]), seg[4], seg[5], at(seg, 6)); ok {
			return s.AuthorizeTopic(ctx, role, auth.ActionLookup, tn, "")
		}
		return nil // malformed: the route answers it
	case len(seg) >= 2 && seg[0] == "admin" && seg[1] == "v3",
		len(seg) >= 3 && seg[0] == "magnetar" && seg[1] == "v1" && seg[2] == "functions":
		return authorizeFunctions(ctx, s, r, seg, role)
	case len(seg) >= 3 && seg[0] == "admin" && seg[1] == "v2" && (seg[2] == "worker" || seg[2] == "worker-stats"):
		return s.AuthorizeSuperuser(ctx, role)
	case len(seg) < 3 || seg[0] != "admin" || seg[1] != "v2":
		return s.AuthorizeSuperuser(ctx, role)
	}
	rest := seg[3:]
	switch seg[2] {
	case "clusters", "brokers":
		if get {
			return nil // any authenticated role may read them
		}
		return s.AuthorizeSuperuser(ctx, role)
	case "tenants":
		if len(rest) == 1 && get {
			return s.AuthorizeTenant(ctx, role, rest[0])
		}
		return s.AuthorizeSuperuser(ctx, role)
	case "namespaces":
		switch {
		case len(rest) == 0:
			return s.AuthorizeSuperuser(ctx, role)
		case len(rest) == 3 && rest[2] == "topics" && get:
			return s.AuthorizeNamespace(ctx, role, auth.ActionConsume, rest[0], rest[1])
		}
		return s.AuthorizeTenant(ctx, role, rest[0])
	case "persistent", "non-persistent":
		if len(rest) < 3 {
			if len(rest) == 0 {
				return s.AuthorizeSuperuser(ctx, role)
			}
			return s.AuthorizeTenant(ctx, role, rest[0])
		}
		tn, ok := topicOf(broker.Domain(seg[2]), rest[0], rest[1], rest[2])
		if !ok {
			return nil
		}
		switch op := at(rest, 3); {
		case get && (op == "partitions" || op == "stats" || op == "partitioned-stats" || op == "internalStats" ||
			op == "internal-stats" || op == "lastMessageId" || op == "messageid"):
			return s.AuthorizeTopic(ctx, role, auth.ActionLookup, tn, "")
		case op == "subscriptions" && get, op == "subscription" && len(rest) >= 5:
			return s.AuthorizeTopic(ctx, role, auth.ActionConsume, tn, at(rest, 4))
		case (op == "ledger" || op == "examinemessage") && get:
			return s.AuthorizeTopic(ctx, role, auth.ActionConsume, tn, "")
		}
		return s.AuthorizeTenant(ctx, role, tn.Tenant)
	case "schemas":
		if len(rest) < 3 {
			return s.AuthorizeSuperuser(ctx, role)
		}
		tn, ok := topicOf(broker.Persistent, rest[0], rest[1], rest[2])
		if !ok {
			return nil
		}
		switch r.Method {
		case http.MethodGet:
			return s.AuthorizeTopic(ctx, role, auth.ActionLookup, tn, "")
		case http.MethodPost:
			return s.AuthorizeTopic(ctx, role, auth.ActionProduce, tn, "")
		}
		return s.AuthorizeTenant(ctx, role, tn.Tenant)
	}
	return s.AuthorizeSuperuser(ctx, role)
}

// authorizeFunctions decides the functions, sources and sinks API
// (/admin/v3/...) and the instances' state API (/magnetar/v1/functions):
// the builtin connector and function lists are open to every
// authenticated role; a tenant's components need its tenant admin (the
// functions API then checks the topics they read and write); uploads and
// downloads by path, superuser.
func authorizeFunctions(ctx context.Context, s *broker.Service, r *http.Request, seg []string, role string) error {
	rest := seg[2:]
	if seg[0] == "magnetar" {
		rest = seg[3:]
		if len(rest) < 1 {
			return s.AuthorizeSuperuser(ctx, role)
		}
		return s.AuthorizeTenant(ctx, role, rest[0])
	}
	if len(rest) < 2 {
		return s.AuthorizeSuperuser(ctx, role)
	}
	switch c, next := rest[0], rest[1]; {
	case c != "functions" && c != "sources" && c != "source" && c != "sinks" && c != "sink":
		return s.AuthorizeSuperuser(ctx, role)
	case r.Method == http.MethodGet && (next == "connectors" || next == "builtins" || next == "builtinsources" || next == "builtinsinks"):
		return nil
	case next == "upload" || next == "download" || strings.HasPrefix(next, "reload") || next == "builtins" || next == "leader":
		return s.AuthorizeSuperuser(ctx, role)
	}
	return s.AuthorizeTenant(ctx, role, rest[1])
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}
