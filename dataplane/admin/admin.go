// Package admin serves Pulsar's admin REST API v2 (/admin/v2/...) and the
// HTTP lookup API (/lookup/v2/...) for one broker, with Pulsar's paths,
// JSON bodies, status codes and error format ({"reason": "..."}), so
// pulsar-admin, pulsaradmin (Go) and the clients' HTTP lookups work
// unchanged.
//
// Routes are matched on the escaped request path, segment by segment, and
// each segment is unescaped on its own, so "%2F" inside a name never splits
// it. Every request runs under a deadline (Config.RequestTimeout); a panic
// in a handler is logged and answered with 500.
//
// The handler keeps no state of its own besides the broker's dynamic
// configuration cache; everything lives in the metadata store through
// package broker, so it is safe for concurrent use.
package admin

import (
	"context"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
)

// Config configures the handler.
type Config struct {
	// WebServiceURL is this broker's http:// URL, returned by lookups.
	WebServiceURL string
	// RequestTimeout bounds every request. Default 30s.
	RequestTimeout time.Duration
	// Functions, when set, serves Pulsar's functions, sources and sinks API
	// (/admin/v3/..., /admin/v2/worker...) and the function instances'
	// state API (/magnetar/v1/functions/...), after this handler's
	// authentication and authorization; the authenticated role is in the
	// request's context (auth.RoleFrom).
	Functions http.Handler
	// FunctionsOnly serves Functions, /metrics and /magnetar/v1/usage
	// only, for a worker of a separate pool (magnetar functions-worker):
	// every other path answers 404 naming the brokers as the place for it.
	FunctionsOnly bool
	Logger        *slog.Logger
}

// functionsPath reports the routes Config.Functions serves.
func functionsPath(seg []string) bool {
	switch {
	case len(seg) >= 2 && seg[0] == "admin" && seg[1] == "v3":
		return true
	case len(seg) >= 3 && seg[0] == "admin" && seg[1] == "v2" && (seg[2] == "worker" || seg[2] == "worker-stats"):
		return true
	case len(seg) >= 3 && seg[0] == "magnetar" && seg[1] == "v1" && seg[2] == "functions":
		return true
	}
	return false
}

// Handler serves the admin and lookup APIs.
type Handler struct {
	cfg Config
	svc *broker.Service
	res *broker.Resources
	log *slog.Logger
}

// NewHandler returns the admin API of svc.
func NewHandler(cfg Config, svc *broker.Service) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.WebServiceURL == "" {
		cfg.WebServiceURL = svc.Config().WebServiceURL
	}
	return &Handler{cfg: cfg, svc: svc, res: svc.Resources(), log: cfg.Logger}
}

// segments splits the escaped path and unescapes each segment.
func segments(r *http.Request) ([]string, bool) {
	raw := strings.Trim(r.URL.EscapedPath(), "/")
	if raw == "" {
		return nil, true
	}
	parts := strings.Split(raw, "/")
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return nil, false
		}
		parts[i] = u
	}
	return parts, true
}

// request is one call being served.
type request struct {
	w   http.ResponseWriter
	r   *http.Request
	ctx context.Context
	seg []string // after the API prefix
}

func (q *request) method() string              { return q.r.Method }
func (q *request) query(k string) string       { return q.r.URL.Query().Get(k) }
func (q *request) queryBool(k string) bool     { return strings.EqualFold(q.query(k), "true") }
func (q *request) is(m string, n int) bool     { return q.r.Method == m && len(q.seg) == n }
func (q *request) at(i int, s string) bool     { return len(q.seg) > i && q.seg[i] == s }
func (q *request) rest(from int) []string      { return q.seg[min(from, len(q.seg)):] }
func (q *request) withSeg(s []string) *request { c := *q; c.seg = s; return &c }

// ServeHTTP routes a request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			h.log.Error("admin handler panic", "method", r.Method, "path", r.URL.EscapedPath(), "panic", v, "stack", string(debug.Stack()))
			writeError(w, http.StatusInternalServerError, "Internal server error")
		}
	}()
	seg, ok := segments(r)
	if !ok {
		writeError(w, http.StatusBadRequest, "malformed path")
		return
	}
	r, ok = h.check(w, r, seg)
	if !ok {
		return
	}
	if h.cfg.Functions != nil && functionsPath(seg) {
		h.cfg.Functions.ServeHTTP(w, r)
		return
	}
	if h.cfg.FunctionsOnly && !(len(seg) == 1 && seg[0] == "metrics") && !(len(seg) == 3 && seg[0] == "magnetar" && seg[1] == "v1" && seg[2] == "usage") {
		writeError(w, http.StatusNotFound, "this is a functions worker: it serves /admin/v3 (functions, sources, sinks) and /admin/v2/worker; ask the cluster's brokers for the rest of the admin API")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.RequestTimeout)
	defer cancel()
	q := &request{w: w, r: r, ctx: ctx}
	var err error
	switch {
	case len(seg) == 1 && seg[0] == "metrics":
		promhttp.HandlerFor(h.svc.Metrics(), promhttp.HandlerOpts{}).ServeHTTP(w, r)
		return
	case len(seg) == 3 && seg[0] == "magnetar" && seg[1] == "v1" && seg[2] == "usage" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, h.svc.Usage()) // billing counters (broker/usage.go); superusers only
		return
	case len(seg) >= 3 && seg[0] == "lookup" && seg[1] == "v2" && seg[2] == "topic":
		q.seg = seg[3:]
		err = h.lookup(q)
	case len(seg) >= 3 && seg[0] == "admin" && seg[1] == "v2":
		q.seg = seg[3:]
		switch seg[2] {
		case "clusters":
			err = h.clusters(q)
		case "tenants":
			err = h.tenants(q)
		case "namespaces":
			err = h.namespaces(q)
		case "persistent":
			err = h.topics(q, broker.Persistent)
		case "non-persistent":
			err = h.topics(q, broker.NonPersistent)
		case "schemas":
			err = h.schemas(q)
		case "brokers":
			err = h.brokers(q)
		case "resourcegroups":
			err = h.resourceGroups(q)
		default:
			err = errNotFound
		}
	default:
		err = errNotFound
	}
	if err != nil {
		h.fail(q, err)
	}
}

// webHostPort returns host:port of the web service URL.
func (h *Handler) webHostPort() string {
	u, err := url.Parse(h.cfg.WebServiceURL)
	if err != nil || u.Host == "" {
		return h.cfg.WebServiceURL
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return u.Host + ":80"
	}
	return u.Host
}
