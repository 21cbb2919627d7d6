package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// ControlledOptions configure NewControlled.
type ControlledOptions struct {
	// Client is every setting but the URL, which the endpoint decides.
	// Its TLS trust file and authentication hold on every cluster, unless
	// the endpoint names others (Magnetar's never does: a client following
	// a replication group trusts the group's CA bundle and authenticates
	// for its organization's audience).
	Client pulsar.ClientOptions
	// Header is sent with every request (for example an Authorization
	// header for the endpoint).
	Header http.Header
	// CheckInterval is how often the endpoint is read. Default 30 s.
	CheckInterval time.Duration
	// HTTPClient reads the endpoint. Default: a client with a 10 s timeout.
	HTTPClient *http.Client
	// OnSwitch, when set, is called after each switch.
	OnSwitch func(from, to string)
}

// NewControlled returns a client that uses the cluster an HTTP endpoint
// names, in the JSON of the Java client's ControlledClusterFailover, and
// follows its changes. The endpoint must answer once now.
func NewControlled(ctx context.Context, endpoint string, opts ControlledOptions) (*Client, error) {
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = 30 * time.Second
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	read := func(ctx context.Context) (Cluster, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
		if err != nil {
			return Cluster{}, err
		}
		for k, vs := range opts.Header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		resp, err := hc.Do(req)
		if err != nil {
			return Cluster{}, fmt.Errorf("failover: read %s: %w", endpoint, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return Cluster{}, fmt.Errorf("failover: read %s: %w", endpoint, err)
		}
		if resp.StatusCode != http.StatusOK {
			return Cluster{}, fmt.Errorf("failover: %s answered %s: %s", endpoint, resp.Status, body)
		}
		var c Cluster
		if err := json.Unmarshal(body, &c); err != nil {
			return Cluster{}, fmt.Errorf("failover: %s: %w", endpoint, err)
		}
		if c.ServiceURL == "" {
			return Cluster{}, fmt.Errorf("failover: %s named no serviceUrl", endpoint)
		}
		return c, nil
	}
	first, err := read(ctx)
	if err != nil {
		return nil, err
	}
	c, err := newClient(opts.Client, first, opts.OnSwitch)
	if err != nil {
		return nil, err
	}
	c.loop(opts.CheckInterval, func() {
		ctx, cancel := context.WithTimeout(context.Background(), opts.CheckInterval)
		defer cancel()
		next, err := read(ctx)
		if err != nil {
			return // keep the current cluster while the endpoint is unreadable
		}
		c.switchTo(next)
	})
	return c, nil
}
