package replication

import (
	"context"
	"fmt"
	"sync"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
)

// Pool shares connections to one remote cluster among the replicators of
// a broker: one connection per remote broker, each replicator with its own
// producer on it, so a broker with many replicated topics opens a handful
// of connections to each remote instead of one per topic. A connection is
// closed when its last user releases it, and replaced when it has failed.
type Pool struct {
	opts DialOptions

	mu     sync.Mutex
	conns  map[string]*pooled // by broker URL
	closed bool
}

type pooled struct {
	c    *Conn
	refs int
}

// NewPool returns a pool dialing with opts.
func NewPool(opts DialOptions) *Pool {
	return &Pool{opts: opts, conns: map[string]*pooled{}}
}

// get returns a live connection to url (through the proxy, naming
// brokerURL, when one is set), taking a reference.
func (p *Pool) get(ctx context.Context, url, brokerURL string) (*Conn, error) {
	key := url
	if brokerURL != "" {
		key = brokerURL
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if e := p.conns[key]; e != nil {
		if e.c.Err() == nil {
			e.refs++
			p.mu.Unlock()
			return e.c, nil
		}
		delete(p.conns, key) // failed: its users release it as they notice
	}
	p.mu.Unlock()
	c, err := dial(ctx, url, brokerURL, p.opts)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return nil, ErrClosed
	}
	if e := p.conns[key]; e != nil && e.c.Err() == nil {
		// Another replicator dialed meanwhile: share its connection.
		e.refs++
		go c.Close()
		return e.c, nil
	}
	c.pool = p
	p.conns[key] = &pooled{c: c, refs: 1}
	return c, nil
}

// release gives back a connection DialTopic returned.
func (p *Pool) release(c *Conn) {
	p.mu.Lock()
	for k, e := range p.conns {
		if e.c == c {
			e.refs--
			if e.refs > 0 {
				p.mu.Unlock()
				return
			}
			delete(p.conns, k)
			break
		}
	}
	p.mu.Unlock()
	c.Close() // the last user, or a connection already replaced
}

// Close closes every connection; later calls fail with ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[string]*pooled{}
	p.mu.Unlock()
	for _, e := range conns {
		e.c.Close()
	}
}

// DialTopic returns a pooled connection to the broker that owns topic in
// the cluster at serviceURL, following lookup redirects; Release gives it
// back (Conn.Release).
func (p *Pool) DialTopic(ctx context.Context, serviceURL, topic string) (*Conn, error) {
	url, brokerURL := serviceURL, ""
	authoritative := false
	for range 10 {
		c, err := p.get(ctx, url, brokerURL)
		if err != nil {
			return nil, err
		}
		lr, err := c.Lookup(ctx, topic, authoritative)
		if err != nil {
			p.release(c)
			return nil, err
		}
		target := lr.GetBrokerServiceUrl()
		if p.opts.TLS != nil && lr.GetBrokerServiceUrlTls() != "" {
			target = lr.GetBrokerServiceUrlTls()
		}
		here := c.addr
		if p.opts.ProxyURL != "" {
			here = c.broker
		}
		if lr.GetResponse() == pb.CommandLookupTopicResponse_Connect && (target == "" || lr.GetProxyThroughServiceUrl() || sameBroker(target, here)) {
			return c, nil
		}
		p.release(c)
		if target == "" {
			return nil, fmt.Errorf("replication: lookup of %s at %s named no broker", topic, url)
		}
		url, brokerURL, authoritative = target, target, lr.GetAuthoritative()
		if lr.GetResponse() == pb.CommandLookupTopicResponse_Connect {
			authoritative = true
		}
	}
	return nil, ErrRedirects
}
