package failover

import (
	"context"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// AutomaticOptions configure NewAutomatic (the Java client's
// AutoClusterFailover settings).
type AutomaticOptions struct {
	Client      pulsar.ClientOptions
	Primary     Cluster
	Secondaries []Cluster // in order of preference
	// FailoverDelay: how long the current cluster must fail its probes
	// before a switch. Default 30 s.
	FailoverDelay time.Duration
	// SwitchBackDelay: how long the primary must pass its probes before
	// the client returns to it. Default 60 s.
	SwitchBackDelay time.Duration
	// CheckInterval: how often clusters are probed. Default 5 s.
	CheckInterval time.Duration
	// ProbeTimeout bounds one probe (a TCP connection). Default 3 s.
	ProbeTimeout time.Duration
	OnSwitch     func(from, to string)
}

// NewAutomatic returns a client on the primary that fails over to a
// secondary when the primary stops answering, and back when it returns.
func NewAutomatic(opts AutomaticOptions) (*Client, error) {
	if opts.FailoverDelay <= 0 {
		opts.FailoverDelay = 30 * time.Second
	}
	if opts.SwitchBackDelay <= 0 {
		opts.SwitchBackDelay = 60 * time.Second
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = 5 * time.Second
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = defaultProbeTimeout
	}
	c, err := newClient(opts.Client, opts.Primary, opts.OnSwitch)
	if err != nil {
		return nil, err
	}
	all := append([]Cluster{opts.Primary}, opts.Secondaries...)
	st := autoState{downSince: make([]time.Time, len(all)), upSince: make([]time.Time, len(all))}
	c.loop(opts.CheckInterval, func() {
		up := make([]bool, len(all))
		for i, cl := range all {
			up[i] = probe(cl.ServiceURL, opts.ProbeTimeout)
		}
		if next := st.decide(time.Now(), up, opts.FailoverDelay, opts.SwitchBackDelay); next != st.current {
			if err := c.switchTo(all[next]); err == nil || c.ServiceURL() == all[next].ServiceURL {
				st.current = next
			}
		}
	})
	return c, nil
}

// autoState is the automatic failover's memory: the cluster in use (an
// index; 0 is the primary) and since when each cluster has been down or up.
type autoState struct {
	current   int
	downSince []time.Time // zero while up
	upSince   []time.Time // zero while down
}

// decide records one round of probe results at now and returns the cluster
// to use: the current one while it is up or has been down for less than
// failoverDelay; else the first other cluster that is up (primary first);
// and the primary again once it has been up for switchBackDelay.
func (s *autoState) decide(now time.Time, up []bool, failoverDelay, switchBackDelay time.Duration) int {
	for i, u := range up {
		switch {
		case u && s.upSince[i].IsZero():
			s.upSince[i], s.downSince[i] = now, time.Time{}
		case !u && s.downSince[i].IsZero():
			s.downSince[i], s.upSince[i] = now, time.Time{}
		}
	}
	cur := s.current
	if cur != 0 && up[0] && now.Sub(s.upSince[0]) >= switchBackDelay {
		return 0
	}
	if up[cur] || now.Sub(s.downSince[cur]) < failoverDelay {
		return cur
	}
	for i := range up {
		if i != cur && up[i] {
			return i
		}
	}
	return cur
}

// probe reports whether a TCP connection to the first host of a service
// URL opens within timeout.
func probe(serviceURL string, timeout time.Duration) bool {
	u, err := url.Parse(serviceURL)
	if err != nil {
		return false
	}
	host, _, _ := strings.Cut(u.Host, ",")
	if _, _, err := net.SplitHostPort(host); err != nil {
		port := "6650"
		if u.Scheme == "pulsar+ssl" {
			port = "6651"
		}
		host = net.JoinHostPort(host, port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
