package protocol

import (
	"context"
	"errors"

	"github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// Decoding errors. A Reader error other than io.EOF wraps one of the first
// four or the underlying read error; the connection that produced it must be
// closed. The others come from ParseHeadersAndPayload and ParseBatch (which
// also return ErrChecksum, below).
var (
	ErrFrameTooLarge  = errors.New("protocol: frame too large")
	ErrTruncatedFrame = errors.New("protocol: truncated frame")
	ErrMalformedFrame = errors.New("protocol: malformed frame")
	ErrBadCommand     = errors.New("protocol: bad command")
	ErrBadMagic       = errors.New("protocol: bad magic number in message headers")
	ErrBadMetadata    = errors.New("protocol: bad message metadata")
	ErrBadBatch       = errors.New("protocol: bad batch payload")
	ErrCompressed     = errors.New("protocol: payload is compressed")
	ErrNotBatch       = errors.New("protocol: entry is not a batch")
)

// Error is an error the broker reports to a client as a ServerError code.
// Compare with errors.Is against the sentinels below: two *Error match when
// their codes are equal, whatever their messages.
type Error struct {
	// Code is sent in ERROR, SEND_ERROR and the error fields of responses.
	Code pulsarwire.ServerError
	// Message is the text sent to the client; it must not reveal internals.
	Message string
	// Retriable reports whether the same request may succeed later
	// (possibly after a new lookup) without the client changing it.
	Retriable bool
}

func (e *Error) Error() string {
	return "protocol: " + e.Code.String() + ": " + e.Message
}

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// WithMessage returns a copy of e that tells the client msg instead.
func (e *Error) WithMessage(msg string) *Error {
	c := *e
	c.Message = msg
	return &c
}

// Errors with their ServerError codes, one per code.
var (
	ErrUnknown                        = &Error{pulsarwire.ServerError_UnknownError, "internal error", false}
	ErrMetadata                       = &Error{pulsarwire.ServerError_MetadataError, "metadata store error", true}
	ErrPersistence                    = &Error{pulsarwire.ServerError_PersistenceError, "storage error", true}
	ErrAuthentication                 = &Error{pulsarwire.ServerError_AuthenticationError, "authentication failed", false}
	ErrAuthorization                  = &Error{pulsarwire.ServerError_AuthorizationError, "not authorized", false}
	ErrConsumerBusy                   = &Error{pulsarwire.ServerError_ConsumerBusy, "subscription is in use by another consumer", false}
	ErrServiceNotReady                = &Error{pulsarwire.ServerError_ServiceNotReady, "service not ready", true}
	ErrProducerBlockedQuotaExceeded   = &Error{pulsarwire.ServerError_ProducerBlockedQuotaExceededError, "backlog quota exceeded", false}
	ErrProducerBlockedQuotaException  = &Error{pulsarwire.ServerError_ProducerBlockedQuotaExceededException, "backlog quota exceeded", false}
	ErrChecksum                       = &Error{pulsarwire.ServerError_ChecksumError, "checksum mismatch", false}
	ErrUnsupportedVersion             = &Error{pulsarwire.ServerError_UnsupportedVersionError, "unsupported protocol version or feature", false}
	ErrTopicNotFound                  = &Error{pulsarwire.ServerError_TopicNotFound, "topic not found", false}
	ErrSubscriptionNotFound           = &Error{pulsarwire.ServerError_SubscriptionNotFound, "subscription not found", false}
	ErrConsumerNotFound               = &Error{pulsarwire.ServerError_ConsumerNotFound, "consumer not found", false}
	ErrTooManyRequests                = &Error{pulsarwire.ServerError_TooManyRequests, "too many requests", true}
	ErrTopicTerminated                = &Error{pulsarwire.ServerError_TopicTerminatedError, "topic was terminated", false}
	ErrProducerBusy                   = &Error{pulsarwire.ServerError_ProducerBusy, "producer with the same name is already connected", false}
	ErrInvalidTopicName               = &Error{pulsarwire.ServerError_InvalidTopicName, "invalid topic name", false}
	ErrIncompatibleSchema             = &Error{pulsarwire.ServerError_IncompatibleSchema, "incompatible schema", false}
	ErrConsumerAssign                 = &Error{pulsarwire.ServerError_ConsumerAssignError, "consumer cannot be assigned", false}
	ErrTransactionCoordinatorNotFound = &Error{pulsarwire.ServerError_TransactionCoordinatorNotFound, "transaction coordinator not found", true}
	ErrInvalidTxnStatus               = &Error{pulsarwire.ServerError_InvalidTxnStatus, "invalid transaction status", false}
	ErrNotAllowed                     = &Error{pulsarwire.ServerError_NotAllowedError, "operation not allowed", false}
	ErrTransactionConflict            = &Error{pulsarwire.ServerError_TransactionConflict, "transaction conflict", false}
	ErrTransactionNotFound            = &Error{pulsarwire.ServerError_TransactionNotFound, "transaction not found", false}
	ErrProducerFenced                 = &Error{pulsarwire.ServerError_ProducerFenced, "producer fenced", false}
)

// serverErrors is the one table from ServerError codes to errors, indexed by
// code.
var serverErrors = [...]*Error{
	ErrUnknown, ErrMetadata, ErrPersistence, ErrAuthentication, ErrAuthorization,
	ErrConsumerBusy, ErrServiceNotReady, ErrProducerBlockedQuotaExceeded,
	ErrProducerBlockedQuotaException, ErrChecksum, ErrUnsupportedVersion,
	ErrTopicNotFound, ErrSubscriptionNotFound, ErrConsumerNotFound,
	ErrTooManyRequests, ErrTopicTerminated, ErrProducerBusy, ErrInvalidTopicName,
	ErrIncompatibleSchema, ErrConsumerAssign, ErrTransactionCoordinatorNotFound,
	ErrInvalidTxnStatus, ErrNotAllowed, ErrTransactionConflict,
	ErrTransactionNotFound, ErrProducerFenced,
}

// ErrorForCode returns the sentinel for code, or ErrUnknown for a code this
// version does not know. With a non-empty msg it returns a copy carrying msg
// (for errors received from a peer, e.g. by replication).
func ErrorForCode(code pulsarwire.ServerError, msg string) *Error {
	e := ErrUnknown
	if c := int(code); c >= 0 && c < len(serverErrors) {
		e = serverErrors[c]
	}
	if msg != "" {
		e = e.WithMessage(msg)
	}
	return e
}

// ServerErrorOf turns any error into what the client is told: the code and
// message of the *Error it wraps; ServiceNotReady for a context error (the
// request ran out of time, a retry may succeed); otherwise UnknownError with
// a generic message, so internals never reach a tenant.
func ServerErrorOf(err error) (pulsarwire.ServerError, string) {
	var pe *Error
	switch {
	case errors.As(err, &pe):
		return pe.Code, pe.Message
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ErrServiceNotReady.Code, "request timed out"
	default:
		return ErrUnknown.Code, ErrUnknown.Message
	}
}

// IsRetriable reports whether err wraps a retriable *Error.
func IsRetriable(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Retriable
}
