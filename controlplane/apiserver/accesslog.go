package apiserver

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/magnetar-dev/magnetar/controlplane/issuer"
)

// The HTTP edge observes every request that is not gRPC (REST calls, the
// OpenAPI documents, /healthz, /metrics): one access-log line and the
// request metrics, by HTTP method and status code. A gRPC call from a
// client gets one access-log line from logInterceptor (its metrics are the
// otelgrpc stats handler's); the gateway's in-process calls are the REST
// requests the edge logs already.
//
// The principal of a REST call is known only inside the gRPC interceptor,
// which runs on the gateway's in-process connection under another context.
// The edge therefore registers each request under a random token in
// s.inflight and the gateway sends the token as metadata (httpTokenKey);
// the interceptor looks it up and records the authenticated principal.

// httpTokenKey is the metadata key of the edge's request token.
const httpTokenKey = "x-magnetar-http-request"

// httpRequest is what the edge (or logInterceptor) learns about a request
// while it is served: the principal's name, set by the interceptor.
type httpRequest struct {
	principal atomic.Pointer[string]
}

func (r *httpRequest) principalName() string {
	if p := r.principal.Load(); p != nil {
		return *p
	}
	return "-"
}

type httpRequestKey struct{} // the edge's token, in the HTTP request's context

type grpcCallKey struct{} // the *httpRequest of a client's gRPC call

// fromGateway tells whether a gRPC call came over the gateway's in-process
// connection (a REST request) rather than from a client.
func fromGateway(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	return ok && p.Addr != nil && p.Addr.Network() == "bufconn"
}

// agentService is the prefix of the region agents' methods: heartbeats,
// long-polls and status reports, several a minute per region.
const agentService = "/magnetar.controlplane.v1.RegionAgent/"

// Access-log levels. At info level the log says what changed and what
// failed; a request that succeeded without changing anything (a read, and
// what region agents and brokers poll: role bindings, watches, heartbeats,
// status and usage reports, revocation lists, keys, tokens) is logged at
// debug level.

// quietCall says whether a gRPC call of fullMethod that succeeded (or that
// its caller canceled) is logged at debug level: reads ("Get...", "List...", "Wait...", "Export...") and the
// region agents' periodic calls, usage reports included.
func quietCall(fullMethod string) bool {
	if strings.HasPrefix(fullMethod, agentService) {
		return true
	}
	m := fullMethod[strings.LastIndex(fullMethod, "/")+1:]
	for _, read := range []string{"Get", "List", "Wait", "Export"} {
		if strings.HasPrefix(m, read) {
			return true
		}
	}
	return m == "IngestUsageRecords"
}

// quietRequest says whether an HTTP request answered status is logged at
// debug level: a GET or HEAD that succeeded, or a token granted.
func quietRequest(r *http.Request, status int) bool {
	if status >= http.StatusBadRequest {
		return false
	}
	return r.Method == http.MethodGet || r.Method == http.MethodHead ||
		(r.Method == http.MethodPost && r.URL.Path == issuer.TokenPath)
}

// logInterceptor writes one access-log line per gRPC call of a client
// (method, principal, gRPC code, duration), at the level quietCall says.
func (s *Server) logInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if fromGateway(ctx) {
		return handler(ctx, req)
	}
	start := time.Now()
	call := &httpRequest{}
	resp, err := handler(context.WithValue(ctx, grpcCallKey{}, call), req)
	level := slog.LevelInfo
	if (err == nil || status.Code(err) == codes.Canceled) && quietCall(info.FullMethod) {
		level = slog.LevelDebug // canceled: a watch the agent ended, stopping
	}
	s.log.LogAttrs(ctx, level, "apiserver: grpc call",
		slog.String("method", info.FullMethod),
		slog.String("principal", call.principalName()),
		slog.String("code", status.Code(err).String()),
		slog.Float64("duration_seconds", time.Since(start).Seconds()),
	)
	return resp, err
}

// statusWriter records the status code and body size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observeHTTP wraps next with the access log and the request metrics, at
// the level quietRequest says.
func (s *Server) observeHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		token := randomToken(16)
		req := &httpRequest{}
		s.inflight.Store(token, req)
		defer s.inflight.Delete(token)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), httpRequestKey{}, token)))
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		elapsed := time.Since(start)
		s.metrics.httpRequest(r.Context(), r.Method, sw.status, elapsed)
		level := slog.LevelInfo
		if quietRequest(r, sw.status) {
			level = slog.LevelDebug
		}
		s.log.LogAttrs(r.Context(), level, "apiserver: http request",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.String("principal", req.principalName()),
			slog.Int("status", sw.status),
			slog.Float64("duration_seconds", elapsed.Seconds()),
			slog.Int64("response_bytes", sw.bytes),
			slog.String("remote", r.RemoteAddr),
		)
	})
}

// gatewayMetadata is the gateway's metadata for a REST call: the edge's
// request token.
func gatewayMetadata(ctx context.Context, _ *http.Request) metadata.MD {
	if token, ok := ctx.Value(httpRequestKey{}).(string); ok {
		return metadata.Pairs(httpTokenKey, token)
	}
	return nil
}

// notePrincipal records the authenticated principal for the access log:
// of the client's gRPC call, or of the REST request whose token the
// gateway's metadata carries.
func (s *Server) notePrincipal(ctx context.Context, principal string) {
	if call, ok := ctx.Value(grpcCallKey{}).(*httpRequest); ok {
		call.principal.Store(&principal)
		return
	}
	if !fromGateway(ctx) {
		return
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, token := range md.Get(httpTokenKey) {
		if v, ok := s.inflight.Load(token); ok {
			v.(*httpRequest).principal.Store(&principal)
		}
	}
}

// httpMetrics are the edge's instruments.
type httpMetrics struct {
	requests metric.Int64Counter
	duration metric.Float64Histogram
}

func newHTTPMetrics(m metric.Meter) (httpMetrics, error) {
	requests, err := m.Int64Counter("magnetar.controlplane.http.requests",
		metric.WithDescription("HTTP requests served (REST, OpenAPI, health, metrics; not gRPC), by method and status code."))
	if err != nil {
		return httpMetrics{}, err
	}
	duration, err := m.Float64Histogram("magnetar.controlplane.http.request.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time to serve an HTTP request (not gRPC), by method and status code."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	if err != nil {
		return httpMetrics{}, err
	}
	return httpMetrics{requests: requests, duration: duration}, nil
}

func (m *metrics) httpRequest(ctx context.Context, method string, status int, elapsed time.Duration) {
	attrs := metric.WithAttributes(attribute.String("method", method), attribute.String("code", strconv.Itoa(status)))
	m.http.requests.Add(ctx, 1, attrs)
	m.http.duration.Record(ctx, elapsed.Seconds(), attrs)
}
