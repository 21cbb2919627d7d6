package terraform

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// Defaults of ClientConfig.
const (
	DefaultEndpoint       = "127.0.0.1:7080"
	DefaultRequestTimeout = 30 * time.Second
	DefaultMaxRetries     = 6
)

// ClientConfig configures NewClient.
type ClientConfig struct {
	// Endpoint is host:port (plaintext), http://host:port or
	// https://host:port (TLS with the system roots); default
	// DefaultEndpoint.
	Endpoint string
	// APIKey is sent as "authorization: Bearer <key>" on every call.
	// Required.
	APIKey string
	// RequestTimeout bounds each attempt of each call; default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxRetries is how many times a call answered UNAVAILABLE or
	// RESOURCE_EXHAUSTED is sent again; default DefaultMaxRetries, negative
	// means none.
	MaxRetries int
	// BaseBackoff is the wait before the first retry, doubled per retry up
	// to 5s; default 200ms.
	BaseBackoff time.Duration
}

// Validate fills defaults and checks cfg.
func (c *ClientConfig) Validate() error {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.APIKey == "" {
		return errors.New("magnetar: no API key")
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RequestTimeout < 0 {
		return fmt.Errorf("magnetar: request timeout %s must be positive", c.RequestTimeout)
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.MaxRetries < 0 {
		c.MaxRetries = 0
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = 200 * time.Millisecond
	}
	return nil
}

// Client is a connection to the control-plane API with one generated
// client per service. Safe for concurrent use.
type Client struct {
	cfg  ClientConfig
	conn *grpc.ClientConn

	Organizations   cpv1.OrganizationsClient
	ServiceAccounts cpv1.ServiceAccountsClient
	RoleBindings    cpv1.RoleBindingsClient
	Regions         cpv1.RegionsClient
	Clusters        cpv1.ClustersClient
	Operations      cpv1.OperationsClient
	Tenants         cpv1.TenantsClient
	Namespaces      cpv1.NamespacesClient
	Topics          cpv1.TopicsClient
	Functions       cpv1.FunctionsClient
	Sources         cpv1.SourcesClient
	Sinks           cpv1.SinksClient
}

// NewClient connects lazily to cfg.Endpoint.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	target, creds, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithUnaryInterceptor(c.intercept))
	if err != nil {
		return nil, fmt.Errorf("magnetar: endpoint %q: %w", cfg.Endpoint, err)
	}
	c.conn = conn
	c.Organizations = cpv1.NewOrganizationsClient(conn)
	c.ServiceAccounts = cpv1.NewServiceAccountsClient(conn)
	c.RoleBindings = cpv1.NewRoleBindingsClient(conn)
	c.Regions = cpv1.NewRegionsClient(conn)
	c.Clusters = cpv1.NewClustersClient(conn)
	c.Operations = cpv1.NewOperationsClient(conn)
	c.Tenants = cpv1.NewTenantsClient(conn)
	c.Namespaces = cpv1.NewNamespacesClient(conn)
	c.Topics = cpv1.NewTopicsClient(conn)
	c.Functions = cpv1.NewFunctionsClient(conn)
	c.Sources = cpv1.NewSourcesClient(conn)
	c.Sinks = cpv1.NewSinksClient(conn)
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// parseEndpoint maps an endpoint onto a gRPC target and its transport
// credentials.
func parseEndpoint(endpoint string) (string, credentials.TransportCredentials, error) {
	creds := insecure.NewCredentials()
	rest := endpoint
	switch {
	case strings.HasPrefix(endpoint, "https://"):
		rest = strings.TrimPrefix(endpoint, "https://")
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	case strings.HasPrefix(endpoint, "http://"):
		rest = strings.TrimPrefix(endpoint, "http://")
	case strings.Contains(endpoint, "://"):
		return "", nil, fmt.Errorf("magnetar: endpoint %q: scheme must be http or https", endpoint)
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" || strings.Contains(rest, "/") {
		return "", nil, fmt.Errorf("magnetar: endpoint %q: want host:port, http://host:port or https://host:port", endpoint)
	}
	return rest, creds, nil
}

// retryable reports whether a call answered with err may be sent again
// unchanged: the server was unavailable (503) or asked to slow down (429).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		return true
	}
	return false
}

// backoff is the wait before retry n (0-based): base doubled per retry,
// at most 5s, with up to 25% jitter.
func backoff(base time.Duration, n int) time.Duration {
	d := base << min(n, 10)
	if d > 5*time.Second || d <= 0 {
		d = 5 * time.Second
	}
	return d - time.Duration(mrand.Int64N(int64(d)/4+1))
}

// intercept authenticates every call, bounds each attempt with the request
// timeout and retries retryable failures with backoff.
func (c *Client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.cfg.APIKey)
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		err := invoker(actx, method, req, reply, cc, opts...)
		cancel()
		if err == nil || !retryable(err) || attempt >= c.cfg.MaxRetries {
			return err
		}
		t := time.NewTimer(backoff(c.cfg.BaseBackoff, attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// newRequestID returns a fresh request_id for a create (AIP-155): the
// retries of one create share it, so the server makes one resource.
func newRequestID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// isNotFound reports whether err is the API's NOT_FOUND.
func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// maxAbortedRetries is how often an update refused for a stale etag is
// sent again with the etag read afresh.
const maxAbortedRetries = 3

// updateFresh calls update with etag; when the API answers ABORTED (the
// resource changed since etag was read), it re-reads the etag with reread
// and calls update again, up to maxAbortedRetries times.
func updateFresh[T any](ctx context.Context, etag string, reread func(context.Context) (string, error),
	update func(ctx context.Context, etag string) (T, error)) (T, error) {
	for i := 0; ; i++ {
		out, err := update(ctx, etag)
		if status.Code(err) != codes.Aborted || i >= maxAbortedRetries {
			return out, err
		}
		if etag, err = reread(ctx); err != nil {
			return out, err
		}
	}
}

// operationPoll is the server-side timeout of each WaitOperation call.
const operationPoll = 5 * time.Second

// waitOperation follows op until it is done or ctx ends. A FAILED or
// CANCELLED operation is an error carrying the operation's error.
func (c *Client) waitOperation(ctx context.Context, op *cpv1.Operation) (*cpv1.Operation, error) {
	for !op.GetDone() {
		poll := operationPoll
		if dl, ok := ctx.Deadline(); ok {
			poll = min(poll, time.Until(dl))
		}
		if poll <= 0 {
			return op, fmt.Errorf("timed out waiting for operation %s (%s %s, still %s)", op.GetName(), op.GetType(), op.GetTarget(), op.GetState())
		}
		next, err := c.Operations.WaitOperation(ctx, &cpv1.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(poll)})
		if err != nil {
			if ctx.Err() != nil {
				return op, fmt.Errorf("timed out waiting for operation %s (%s %s, still %s): %w", op.GetName(), op.GetType(), op.GetTarget(), op.GetState(), ctx.Err())
			}
			if status.Code(err) == codes.DeadlineExceeded {
				continue
			}
			return op, fmt.Errorf("wait for operation %s: %w", op.GetName(), err)
		}
		op = next
	}
	switch op.GetState() {
	case cpv1.Operation_FAILED, cpv1.Operation_CANCELLED:
		msg := "no error recorded"
		if e := op.GetError(); e != nil {
			msg = codes.Code(e.GetCode()).String() + ": " + e.GetMessage()
		}
		return op, fmt.Errorf("operation %s (%s %s) %s: %s", op.GetName(), op.GetType(), op.GetTarget(), op.GetState(), msg)
	}
	return op, nil
}

// errNotApplied is wrapped by waitApplied's error when the resource exists
// but the region agent did not apply it in time.
var errNotApplied = errors.New("not applied to the data plane")

// appliedPoll is how often waitApplied reads a Pulsar resource.
const appliedPoll = 300 * time.Millisecond

// waitApplied reads a Pulsar tenant, namespace or topic with get until the
// region agent reports it APPLIED or ctx ends, and returns the last read.
func waitApplied[T interface {
	GetState() cpv1.PulsarResourceState
	GetStatusMessage() string
}](ctx context.Context, name string, get func(context.Context) (T, error)) (T, error) {
	t := time.NewTicker(appliedPoll)
	defer t.Stop()
	for {
		r, err := get(ctx)
		if err != nil {
			return r, err
		}
		if r.GetState() == cpv1.PulsarResourceState_APPLIED {
			return r, nil
		}
		select {
		case <-ctx.Done():
			msg := r.GetStatusMessage()
			if msg == "" {
				msg = "no message from the region agent"
			}
			return r, fmt.Errorf("timed out waiting for %s: %w (state %s: %s)", name, errNotApplied, r.GetState(), msg)
		case <-t.C:
		}
	}
}
