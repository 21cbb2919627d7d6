package state

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrNotConfigured is returned by every call of a Client whose base URL is
// empty or not http(s).
var ErrNotConfigured = errors.New("state storage is not configured for this worker")

const (
	// maxValueBytes bounds a state value read back; maxJSONBytes a JSON or
	// error answer.
	maxValueBytes = 64 << 20
	maxJSONBytes  = 1 << 20
	// defaultTimeout bounds a call whose context has no deadline.
	defaultTimeout = 30 * time.Second
)

// Error is a non-2xx answer of the state API.
type Error struct {
	Op         string // "get state", "put state", "delete state", "increment counter", "get counter"
	Key        string
	StatusCode int
	// Reason is the answer's {"reason": ...}, or its text when it is not
	// JSON.
	Reason string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("state: %s %q: HTTP %d", e.Op, e.Key, e.StatusCode)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Config configures a Client.
type Config struct {
	// BaseURL is the worker's stateStorageServiceUrl, e.g.
	// http://127.0.0.1:8080. Empty or not http(s): every call fails with
	// ErrNotConfigured.
	BaseURL string
	// Tenant, Namespace and Name scope the keys to one function.
	Tenant, Namespace, Name string
	// Token, when set, supplies the bearer token of every request.
	Token func() (string, error)
	// TLS configures https base URLs. Default: the system roots.
	TLS *tls.Config
	// HTTP replaces the HTTP client (tests). Default: one with its own
	// transport and TLS.
	HTTP *http.Client
}

// Client calls the worker's state API for one function. It is safe for
// concurrent use.
type Client struct {
	root  string // base URL + /magnetar/v1/functions/{t}/{ns}/{n}; "" when not configured
	err   error  // why root is ""
	token func() (string, error)
	http  *http.Client
}

// New returns a client for cfg. It never fails: a missing or unusable base
// URL shows as ErrNotConfigured on each call, because a function that never
// uses state must run without it.
func New(cfg Config) *Client {
	c := &Client{token: cfg.Token, http: cfg.HTTP}
	base := strings.TrimSpace(cfg.BaseURL)
	u, perr := url.Parse(base)
	switch {
	case base == "":
		c.err = ErrNotConfigured
	case perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		c.err = fmt.Errorf("%w (stateStorageServiceUrl %q is not an http(s) URL)", ErrNotConfigured, base)
	default:
		u.RawQuery, u.Fragment = "", ""
		c.root = strings.TrimRight(u.String(), "/") + "/magnetar/v1/functions/" +
			url.PathEscape(cfg.Tenant) + "/" + url.PathEscape(cfg.Namespace) + "/" + url.PathEscape(cfg.Name)
	}
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg.TLS
		tr.MaxIdleConnsPerHost = 2
		c.http = &http.Client{Transport: tr}
	}
	return c
}

// Get returns the value of key: nil, nil when the key is absent, an empty
// non-nil slice when its value is empty.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := c.do(ctx, "get state", http.MethodGet, "state", key, nil, func(resp *http.Response) error {
		b, err := readAll(resp.Body, maxValueBytes)
		if b == nil {
			b = []byte{}
		}
		v = b
		return err
	}, http.StatusNotFound)
	return v, err
}

// Put sets key to value.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	return c.do(ctx, "put state", http.MethodPut, "state", key, value, nil)
}

// Delete removes key; removing an absent key is not an error.
func (c *Client) Delete(ctx context.Context, key string) error {
	return c.do(ctx, "delete state", http.MethodDelete, "state", key, nil, nil, http.StatusNotFound)
}

// Incr adds delta to the counter key and returns its new value.
func (c *Client) Incr(ctx context.Context, key string, delta int64) (int64, error) {
	body, _ := json.Marshal(struct {
		Delta int64 `json:"delta"`
	}{delta})
	return c.counter(ctx, "increment counter", http.MethodPost, key, body)
}

// Counter returns the value of the counter key, 0 when it is absent.
func (c *Client) Counter(ctx context.Context, key string) (int64, error) {
	return c.counter(ctx, "get counter", http.MethodGet, key, nil)
}

func (c *Client) counter(ctx context.Context, op, method, key string, body []byte) (int64, error) {
	var v struct {
		Value *int64 `json:"value"`
	}
	err := c.do(ctx, op, method, "counter", key, body, func(resp *http.Response) error {
		b, err := readAll(resp.Body, maxJSONBytes)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("answer is not JSON: %w", err)
		}
		if v.Value == nil {
			return errors.New(`answer has no "value"`)
		}
		return nil
	})
	if err != nil || v.Value == nil {
		return 0, err
	}
	return *v.Value, nil
}

// do sends one request. ok reads a 2xx answer; a status in absent counts
// as success with no answer read.
func (c *Client) do(ctx context.Context, op, method, kind, key string, body []byte, ok func(*http.Response) error, absent ...int) error {
	if c == nil {
		return ErrNotConfigured
	}
	if c.root == "" {
		return c.err
	}
	if key == "" {
		return fmt.Errorf("state: %s: empty key", op)
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.root+"/"+kind+"/"+url.PathEscape(key), rd)
	if err != nil {
		return fmt.Errorf("state: %s %q: %w", op, key, err)
	}
	switch {
	case kind == "counter" && body != nil:
		req.Header.Set("Content-Type", "application/json")
	case body != nil:
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.token != nil {
		t, err := c.token()
		if err != nil {
			return fmt.Errorf("state: %s %q: %w", op, key, err)
		}
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("state: %s %q: %w", op, key, err)
	}
	defer func() {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSONBytes))
		resp.Body.Close()
	}()
	for _, s := range absent {
		if resp.StatusCode == s {
			return nil
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &Error{Op: op, Key: key, StatusCode: resp.StatusCode, Reason: reason(resp.Body)}
	}
	if ok != nil {
		if err := ok(resp); err != nil {
			return fmt.Errorf("state: %s %q: %w", op, key, err)
		}
	}
	return nil
}

// reason extracts {"reason": ...} from an error answer, or its first line
// of text.
func reason(r io.Reader) string {
	b, _ := readAll(r, maxJSONBytes)
	var e struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(b, &e) == nil && e.Reason != "" {
		return e.Reason
	}
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

func readAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("answer is larger than %d bytes", limit)
	}
	return b, nil
}
