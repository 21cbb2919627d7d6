package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// maxBody bounds request bodies.
const maxBody = 8 << 20

// apiError is an error with the HTTP status and reason to answer.
type apiError struct {
	status int
	reason string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.reason) }

func failf(status int, format string, args ...any) error {
	return &apiError{status: status, reason: fmt.Sprintf(format, args...)}
}

var (
	errNotFound      = failf(http.StatusNotFound, "Not Found")
	errNotAllowed    = failf(http.StatusMethodNotAllowed, "Method Not Allowed")
	errTenantMissing = failf(http.StatusNotFound, "Tenant does not exist")
	errNsMissing     = failf(http.StatusNotFound, "Namespace does not exist")
	errTopicMissing  = failf(http.StatusNotFound, "Topic not found")
)

// statusOf maps an error to the HTTP status and reason Pulsar would answer.
// Unexpected errors become 500 without their text (it is logged).
func statusOf(err error) (int, string, bool) {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status, ae.reason, true
	}
	reason := func(sentinel error) string {
		msg := err.Error()
		if i := strings.Index(msg, sentinel.Error()+": "); i >= 0 {
			return msg[i+len(sentinel.Error())+2:]
		}
		return msg
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "Request timed out", true
	case errors.Is(err, broker.ErrNotFound):
		return http.StatusNotFound, reason(broker.ErrNotFound), true
	case errors.Is(err, broker.ErrAlreadyExists):
		return http.StatusConflict, reason(broker.ErrAlreadyExists), true
	case errors.Is(err, broker.ErrNotEmpty):
		return http.StatusConflict, reason(broker.ErrNotEmpty), true
	case errors.Is(err, broker.ErrConflict):
		return http.StatusConflict, reason(broker.ErrConflict), true
	case errors.Is(err, broker.ErrPrecondition):
		return http.StatusPreconditionFailed, reason(broker.ErrPrecondition), true
	case errors.Is(err, ledger.ErrNotFound):
		return http.StatusNotFound, "Not found", true
	case errors.Is(err, ledger.ErrInvalidArgument), errors.Is(err, ledger.ErrInvalidPosition):
		return http.StatusBadRequest, err.Error(), true
	case errors.Is(err, ledger.ErrTerminated):
		return http.StatusPreconditionFailed, "Topic is terminated", true
	case errors.Is(err, protocol.ErrTopicNotFound):
		return http.StatusNotFound, "Topic not found", true
	case errors.Is(err, protocol.ErrNotAllowed), errors.Is(err, protocol.ErrInvalidTopicName):
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return http.StatusPreconditionFailed, pe.Error(), true
		}
		return http.StatusPreconditionFailed, err.Error(), true
	}
	return http.StatusInternalServerError, "Internal server error", false
}

func (h *Handler) fail(q *request, err error) {
	status, reason, known := statusOf(err)
	if !known {
		h.log.Error("admin request failed", "method", q.r.Method, "path", q.r.URL.EscapedPath(), "err", err)
	}
	writeError(q.w, status, reason)
}

// writeError writes Pulsar's error body.
func writeError(w http.ResponseWriter, status int, reason string) {
	writeJSON(w, status, map[string]string{"reason": reason})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"reason":"Internal server error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func ok(q *request, v any) error {
	writeJSON(q.w, http.StatusOK, v)
	return nil
}

// okRaw answers 200 with a stored JSON value, or 204 when there is none.
func okRaw(q *request, raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return noContent(q)
	}
	q.w.Header().Set("Content-Type", "application/json")
	q.w.WriteHeader(http.StatusOK)
	q.w.Write(raw)
	return nil
}

func noContent(q *request) error {
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

// body reads the request body (empty if none).
func (q *request) body() ([]byte, error) {
	if q.r.ContentLength == 0 {
		return nil, nil // declared empty (most topic creations): no buffer
	}
	b, err := io.ReadAll(io.LimitReader(q.r.Body, maxBody+1))
	if err != nil {
		return nil, failf(http.StatusBadRequest, "Cannot read request body: %v", err)
	}
	if len(b) > maxBody {
		return nil, failf(http.StatusRequestEntityTooLarge, "Request body too large")
	}
	return bytes.TrimSpace(b), nil
}

// decode parses a JSON body into v. An empty (or null) body leaves v
// unchanged and reports false.
func (q *request) decode(v any) (bool, error) {
	b, err := q.body()
	if err != nil {
		return false, err
	}
	if len(b) == 0 || string(b) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, failf(http.StatusBadRequest, "Invalid JSON body: %v", err)
	}
	return true, nil
}

// mustDecode parses a required JSON body.
func (q *request) mustDecode(v any) error {
	present, err := q.decode(v)
	if err != nil {
		return err
	}
	if !present {
		return failf(http.StatusBadRequest, "Request body is required")
	}
	return nil
}
