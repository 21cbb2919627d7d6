package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// MaxBodyBytes bounds a REST request body (4 MiB, gRPC's default message
// limit): a larger one is refused with 413 before it is parsed.
const MaxBodyBytes = 4 << 20

// httpError writes a JSON error in the shape the gateway uses for gRPC
// statuses ({"code", "message"}), code being the gRPC code number.
func httpError(w http.ResponseWriter, status int, grpcCode int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": grpcCode, "message": msg, "details": []any{}})
}

// limitBody refuses bodies over MaxBodyBytes: at once when Content-Length
// says so, else when reading passes the limit (the decoder then fails with
// a message naming the limit).
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			httpError(w, http.StatusRequestEntityTooLarge, 3, fmt.Sprintf("request body is %d bytes; the limit is %d (4 MiB)", r.ContentLength, MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// authBeforeBody authenticates a request that carries a body before any of
// the body is read: without valid credentials it is answered 401 at once,
// so an anonymous client cannot make the server read (and the gateway
// parse) what it sends. Requests without a body are authenticated by the
// gRPC interceptor as usual, which also authenticates these again.
func (s *Server) authBeforeBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			md := metadata.Pairs("authorization", r.Header.Get("Authorization"))
			if r.Header.Get("Authorization") == "" {
				md = metadata.MD{}
			}
			if _, err := s.authenticate(metadata.NewIncomingContext(r.Context(), md)); err != nil {
				st := status.Convert(err)
				code := runtime.HTTPStatusFromCode(st.Code())
				// The client may still be sending: close the connection
				// rather than read the rest to keep it.
				w.Header().Set("Connection", "close")
				httpError(w, code, int(st.Code()), st.Message())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// bodyMarshaler is the gateway's JSON marshaler with request-body errors
// said as such: "request body is not valid JSON: ..." rather than the
// parser's bare "unexpected EOF", and the size limit named.
type bodyMarshaler struct{ *runtime.JSONPb }

func (m bodyMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	d := m.JSONPb.NewDecoder(r)
	return runtime.DecoderFunc(func(v any) error {
		err := d.Decode(v)
		var tooBig *http.MaxBytesError
		switch {
		case err == nil, errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
			return err
		case errors.As(err, &tooBig):
			return fmt.Errorf("request body is larger than the limit of %d bytes (4 MiB)", MaxBodyBytes)
		case strings.Contains(err.Error(), "unknown field"):
			return err // names the field already
		}
		return fmt.Errorf("request body is not valid JSON: %v", err)
	})
}

// routingError answers a path with no method of that verb 405 (the
// gateway's default is 501) with an Allow header naming the path's
// methods, and an unknown path 404, in JSON.
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
	switch status {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		if allow := restRoutes.allowed(r.URL.Path); allow != "" {
			w.Header().Set("Allow", allow)
		}
		httpError(w, http.StatusMethodNotAllowed, 12, fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path))
	case http.StatusNotFound:
		httpError(w, http.StatusNotFound, 5, fmt.Sprintf("no API resource at %s", r.URL.Path))
	default:
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, status)
	}
}

// routes are the REST path templates of the API with their methods, read
// from the OpenAPI 3 document (one entry per path).
type routes []route

type route struct {
	re      *regexp.Regexp
	verb    bool // the template ends in a custom method (":revoke")
	methods []string
}

var restRoutes = mustRoutes(cpv1.OpenAPI3)

var pathParam = regexp.MustCompile(`\\\{[^}]+\}`)

func mustRoutes(doc []byte) routes {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic("apiserver: the embedded OpenAPI 3 document: " + err.Error())
	}
	var rs routes
	for path, ops := range d.Paths {
		var methods []string
		for m := range ops {
			methods = append(methods, strings.ToUpper(m))
		}
		sort.Strings(methods)
		re := regexp.MustCompile("^" + pathParam.ReplaceAllString(regexp.QuoteMeta(path), "[^/]+") + "$")
		verb := strings.Contains(path[strings.LastIndexAny(path, "}/")+1:], ":")
		rs = append(rs, route{re: re, verb: verb, methods: methods})
	}
	return rs
}

// allowed is the Allow header value for path: the methods of every
// template it matches, sorted, those of custom-method templates only when
// one matches (a parameter may hold a ':'); "" when it matches none.
func (rs routes) allowed(path string) string {
	var matched []route
	verb := false
	for _, r := range rs {
		if r.re.MatchString(path) {
			matched = append(matched, r)
			verb = verb || r.verb
		}
	}
	set := map[string]bool{}
	for _, r := range matched {
		if r.verb == verb {
			for _, m := range r.methods {
				set[m] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
