package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
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
// gateway's default is 501) and an unknown path 404, in JSON.
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, status int) {
	switch status {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		httpError(w, http.StatusMethodNotAllowed, 12, fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path))
	case http.StatusNotFound:
		httpError(w, http.StatusNotFound, 5, fmt.Sprintf("no API resource at %s", r.URL.Path))
	default:
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, status)
	}
}
