package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// storeCodes is the one table from store errors to gRPC codes. The message
// of a mapped error is the API's own, never the store's text.
var storeCodes = []struct {
	err  error
	code codes.Code
	msg  string
}{
	{store.ErrNotFound, codes.NotFound, "not found"},
	{store.ErrAlreadyExists, codes.AlreadyExists, "already exists"},
	{store.ErrEtagMismatch, codes.Aborted, "etag mismatch: the resource changed; read it again"},
	{store.ErrInvalidPageToken, codes.InvalidArgument, "page_token: invalid or for a different query"},
	{store.ErrClosed, codes.Unavailable, "service shutting down"},
	{context.Canceled, codes.Canceled, "request cancelled"},
	{context.DeadlineExceeded, codes.DeadlineExceeded, "deadline exceeded"},
}

// toStatus turns any error from a handler into a gRPC status error. subject
// names the resource for NOT_FOUND/ALREADY_EXISTS/ABORTED messages. Errors
// that already carry a status pass unchanged; unknown errors become INTERNAL
// with a generic message (the details are logged, not sent).
func (s *Server) toStatus(err error, subject string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range storeCodes {
		if errors.Is(err, e.err) {
			if subject != "" {
				return status.Error(e.code, fmt.Sprintf("%s: %s", subject, e.msg))
			}
			return status.Error(e.code, e.msg)
		}
	}
	s.log.Error("apiserver: internal error", slog.String("subject", subject), slog.String("err", err.Error()))
	return status.Error(codes.Internal, "internal error")
}

// invalid is an INVALID_ARGUMENT naming the field: invalid("cluster.region", "required").
func invalid(field, format string, args ...any) error {
	return status.Error(codes.InvalidArgument, field+": "+fmt.Sprintf(format, args...))
}
