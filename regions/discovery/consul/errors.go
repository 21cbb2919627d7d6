package consul

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"
)

// ErrACL is matched (errors.Is) by every *ACLError.
var ErrACL = errors.New("consul: ACL token refused")

// ACLError is Consul refusing a request with HTTP 403: the token is not
// known ("ACL not found") or lacks a permission ("Permission denied").
type ACLError struct {
	// Op is what was attempted.
	Op string
	// Permission is the ACL permission Op needs, as Consul's policies
	// spell it: `service:write on "acme"`.
	Permission string
	// TokenFrom says where the token came from (never the token itself).
	TokenFrom string
	// Reason is Consul's answer.
	Reason string
}

func (e *ACLError) Error() string {
	if strings.Contains(e.Reason, "ACL not found") {
		return fmt.Sprintf("consul: %s: Consul does not know the ACL token (%s): 403 %s; use a token whose policy grants %s",
			e.Op, e.TokenFrom, e.Reason, e.Permission)
	}
	return fmt.Sprintf("consul: %s: the ACL token (%s) lacks %s: 403 %s", e.Op, e.TokenFrom, e.Permission, e.Reason)
}

// Unwrap makes errors.Is(err, ErrACL) true.
func (e *ACLError) Unwrap() error { return ErrACL }

// wrap turns an API error into this package's: an *ACLError for a 403,
// else "consul: <op>: <err>".
func (c *client) wrap(err error, op, permission string) error {
	if err == nil {
		return nil
	}
	var se api.StatusError
	if errors.As(err, &se) && se.Code == http.StatusForbidden {
		return &ACLError{Op: op, Permission: permission, TokenFrom: c.tokenFrom, Reason: se.Body}
	}
	// Some endpoints report errors in their own words.
	if msg := err.Error(); strings.Contains(msg, "Unexpected response code: 403") {
		reason := msg
		if _, after, ok := strings.Cut(msg, "403 ("); ok {
			reason = strings.TrimSuffix(after, ")")
		}
		return &ACLError{Op: op, Permission: permission, TokenFrom: c.tokenFrom, Reason: reason}
	}
	return fmt.Errorf("consul: %s: %w", op, err)
}

// checkGone reports whether err says a TTL check is not (or no longer) on
// the agent, so its service must be registered again.
func checkGone(err error) bool {
	var se api.StatusError
	if errors.As(err, &se) {
		if se.Code == http.StatusNotFound {
			return true
		}
		b := strings.ToLower(se.Body)
		return strings.Contains(b, "unknown check") || strings.Contains(b, "does not have associated ttl") ||
			strings.Contains(b, "no check")
	}
	return false
}
