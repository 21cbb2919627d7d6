package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// ErrClosed is returned by the handles of a closed Client.
var ErrClosed = errors.New("failover: client closed")

// MaxSwitchRetries bounds how many times a send that failed because of a
// switch is retried on the next cluster.
const MaxSwitchRetries = 3

// Cluster is where a client connects and how it authenticates.
type Cluster struct {
	ServiceURL        string `json:"serviceUrl"`
	TLSTrustCertsFile string `json:"tlsTrustCertsFilePath,omitempty"`
	// AuthPlugin and AuthParams are a Pulsar client authentication plugin
	// (class name or short name: "token", "tls", ...) and its parameters,
	// as pulsar.NewAuthentication takes them.
	AuthPlugin string `json:"authPluginClassName,omitempty"`
	AuthParams string `json:"authParamsString,omitempty"`
	// Authentication, when set, is used instead of AuthPlugin.
	Authentication pulsar.Authentication `json:"-"`
}

func (c Cluster) same(o Cluster) bool {
	return c.ServiceURL == o.ServiceURL && c.TLSTrustCertsFile == o.TLSTrustCertsFile &&
		c.AuthPlugin == o.AuthPlugin && c.AuthParams == o.AuthParams && c.Authentication == o.Authentication
}

// Client is a Pulsar client whose cluster can change under its producers
// and consumers.
type Client struct {
	base     pulsar.ClientOptions
	onSwitch func(from, to string)

	mu        sync.Mutex
	cluster   Cluster
	cur       pulsar.Client
	gen       uint64 // bumped at every switch
	producers map[*Producer]struct{}
	consumers map[*Consumer]struct{}
	closed    bool

	stop chan struct{}
	wg   sync.WaitGroup
}

func newClient(base pulsar.ClientOptions, first Cluster, onSwitch func(from, to string)) (*Client, error) {
	pc, err := dial(base, first)
	if err != nil {
		return nil, err
	}
	return &Client{base: base, onSwitch: onSwitch, cluster: first, cur: pc,
		producers: map[*Producer]struct{}{}, consumers: map[*Consumer]struct{}{}, stop: make(chan struct{})}, nil
}

// dial makes a pulsar.Client for a cluster (connections open on first use).
func dial(base pulsar.ClientOptions, c Cluster) (pulsar.Client, error) {
	opts := base
	opts.URL = c.ServiceURL
	if c.TLSTrustCertsFile != "" {
		opts.TLSTrustCertsFilePath = c.TLSTrustCertsFile
	}
	switch {
	case c.Authentication != nil:
		opts.Authentication = c.Authentication
	case c.AuthPlugin != "":
		a, err := pulsar.NewAuthentication(c.AuthPlugin, c.AuthParams)
		if err != nil {
			return nil, fmt.Errorf("failover: authentication for %s: %w", c.ServiceURL, err)
		}
		opts.Authentication = a
	}
	pc, err := pulsar.NewClient(opts)
	if err != nil {
		return nil, fmt.Errorf("failover: client for %s: %w", c.ServiceURL, err)
	}
	return pc, nil
}

// ServiceURL is the cluster the client uses now.
func (c *Client) ServiceURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cluster.ServiceURL
}

// switchTo moves every producer and consumer to cluster to. A producer or
// consumer that cannot be created there yet is retried at the next switch
// or provider check (Producer.Send and Consumer.Receive report the error
// meanwhile).
func (c *Client) switchTo(to Cluster) error {
	c.mu.Lock()
	if c.closed || c.cluster.same(to) {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	pc, err := dial(c.base, to)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		pc.Close()
		return nil
	}
	old, from := c.cur, c.cluster.ServiceURL
	c.cur, c.cluster = pc, to
	c.gen++
	prods := make([]*Producer, 0, len(c.producers))
	for p := range c.producers {
		prods = append(prods, p)
	}
	conss := make([]*Consumer, 0, len(c.consumers))
	for k := range c.consumers {
		conss = append(conss, k)
	}
	c.mu.Unlock()
	var errs []error
	for _, p := range prods {
		errs = append(errs, p.reattach(pc))
	}
	for _, k := range conss {
		errs = append(errs, k.reattach(pc))
	}
	// The old cluster may be unreachable: closing its handles can take
	// their timeouts, so it happens in the background.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		old.Close()
	}()
	if c.onSwitch != nil {
		c.onSwitch(from, to.ServiceURL)
	}
	return errors.Join(errs...)
}

// repair re-creates producers and consumers that failed to attach at a
// switch.
func (c *Client) repair() {
	c.mu.Lock()
	pc := c.cur
	var prods []*Producer
	for p := range c.producers {
		prods = append(prods, p)
	}
	var conss []*Consumer
	for k := range c.consumers {
		conss = append(conss, k)
	}
	c.mu.Unlock()
	for _, p := range prods {
		if p.broken() {
			p.reattach(pc)
		}
	}
	for _, k := range conss {
		if k.broken() {
			k.reattach(pc)
		}
	}
}

// CreateProducer creates a producer on the current cluster; it follows
// every switch.
func (c *Client) CreateProducer(opts pulsar.ProducerOptions) (*Producer, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	pc, gen := c.cur, c.gen
	c.mu.Unlock()
	under, err := pc.CreateProducer(opts)
	if err != nil {
		return nil, err
	}
	p := &Producer{c: c, opts: opts, cur: under, gen: gen}
	c.mu.Lock()
	c.producers[p] = struct{}{}
	moved := c.gen != gen
	pc = c.cur
	c.mu.Unlock()
	if moved {
		p.reattach(pc)
	}
	return p, nil
}

// Subscribe creates a consumer on the current cluster; it follows every
// switch.
func (c *Client) Subscribe(opts pulsar.ConsumerOptions) (*Consumer, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	pc := c.cur
	c.mu.Unlock()
	under, err := pc.Subscribe(opts)
	if err != nil {
		return nil, err
	}
	k := &Consumer{c: c, opts: opts, msgs: make(chan Message), stop: make(chan struct{})}
	k.attach(under)
	c.mu.Lock()
	c.consumers[k] = struct{}{}
	moved := c.cur != pc
	pc = c.cur
	c.mu.Unlock()
	if moved {
		k.reattach(pc)
	}
	return k, nil
}

// Close closes every producer and consumer and the client, and stops the
// provider.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.stop)
	prods := c.producers
	conss := c.consumers
	c.producers, c.consumers = map[*Producer]struct{}{}, map[*Consumer]struct{}{}
	pc := c.cur
	c.mu.Unlock()
	for p := range prods {
		p.close()
	}
	for k := range conss {
		k.close()
	}
	c.wg.Wait()
	pc.Close()
}

// Producer is a producer that follows the client's cluster.
type Producer struct {
	c    *Client
	opts pulsar.ProducerOptions

	mu     sync.Mutex
	cur    pulsar.Producer // nil while it could not be created on the current cluster
	gen    uint64
	err    error // why cur is nil
	closed bool
}

func (p *Producer) broken() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur == nil && !p.closed
}

func (p *Producer) reattach(pc pulsar.Client) error {
	// The old producer goes first: it may have followed a migration of its
	// topic to the new cluster, where it holds the producer's name.
	p.mu.Lock()
	old := p.cur
	p.mu.Unlock()
	if old != nil {
		p.c.closeWithin(old.Close, oldCloseWait)
	}
	under, err := pc.CreateProducer(p.opts)
	if err != nil {
		under = nil // the client returns a typed nil with its error
	}
	p.c.mu.Lock()
	gen := p.c.gen
	p.c.mu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		if under != nil {
			under.Close()
		}
		return nil
	}
	p.cur, p.gen, p.err = under, gen, err
	p.mu.Unlock()
	return err
}

// oldCloseWait bounds how long a switch waits for a producer or consumer
// of the old cluster to close before creating its successor (the old
// cluster may be unreachable; the close then goes on in the background).
const oldCloseWait = 2 * time.Second

// closeWithin runs closeFn in an owned goroutine and waits for it at most d.
func (c *Client) closeWithin(closeFn func(), d time.Duration) {
	done := make(chan struct{})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(done)
		closeFn()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func (p *Producer) current() (pulsar.Producer, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return nil, 0, ErrClosed
	case p.cur == nil:
		return nil, p.gen, fmt.Errorf("failover: producer not attached to %s: %w", p.c.ServiceURL(), p.err)
	}
	return p.cur, p.gen, nil
}

// Send sends msg on the current cluster; a send that fails because the
// client switched is retried on the new cluster.
func (p *Producer) Send(ctx context.Context, msg *pulsar.ProducerMessage) (pulsar.MessageID, error) {
	for attempt := 0; ; attempt++ {
		under, gen, err := p.current()
		if err != nil {
			return nil, err
		}
		id, err := under.Send(ctx, msg)
		if err == nil {
			return id, nil
		}
		if attempt >= MaxSwitchRetries || ctx.Err() != nil || !p.switchedSince(gen) {
			return nil, err
		}
	}
}

// SendAsync sends msg on the current cluster and calls cb once with the
// outcome; a send that fails because the client switched is retried on the
// new cluster.
func (p *Producer) SendAsync(ctx context.Context, msg *pulsar.ProducerMessage, cb func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
	p.sendAsync(ctx, msg, cb, 0)
}

func (p *Producer) sendAsync(ctx context.Context, msg *pulsar.ProducerMessage, cb func(pulsar.MessageID, *pulsar.ProducerMessage, error), attempt int) {
	under, gen, err := p.current()
	if err != nil {
		cb(nil, msg, err)
		return
	}
	under.SendAsync(ctx, msg, func(id pulsar.MessageID, m *pulsar.ProducerMessage, err error) {
		if err != nil && attempt < MaxSwitchRetries && ctx.Err() == nil && p.switchedSince(gen) {
			p.sendAsync(ctx, msg, cb, attempt+1)
			return
		}
		cb(id, m, err)
	})
}

// switchedSince reports whether the producer moved since generation gen.
func (p *Producer) switchedSince(gen uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen != gen
}

// Flush flushes the current underlying producer.
func (p *Producer) Flush() error {
	under, _, err := p.current()
	if err != nil {
		return err
	}
	return under.Flush()
}

// Close closes the producer.
func (p *Producer) Close() {
	p.c.mu.Lock()
	delete(p.c.producers, p)
	p.c.mu.Unlock()
	p.close()
}

func (p *Producer) close() {
	p.mu.Lock()
	under := p.cur
	p.cur, p.closed = nil, true
	p.mu.Unlock()
	if under != nil {
		under.Close()
	}
}

// Message is a received message and the consumer it came from, which
// acknowledges it.
type Message struct {
	pulsar.Message
	from pulsar.Consumer
}

// Consumer is a consumer that follows the client's cluster.
type Consumer struct {
	c    *Client
	opts pulsar.ConsumerOptions
	msgs chan Message
	stop chan struct{}

	mu     sync.Mutex
	cur    pulsar.Consumer
	pump   chan struct{} // closed to stop the current pump
	err    error
	closed bool
	wg     sync.WaitGroup
}

// attach makes under current and starts its pump.
func (k *Consumer) attach(under pulsar.Consumer) {
	stop := make(chan struct{})
	k.mu.Lock()
	k.cur, k.pump, k.err = under, stop, nil
	k.mu.Unlock()
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for {
			select {
			case <-stop:
				return
			case m, ok := <-under.Chan():
				if !ok {
					return
				}
				select {
				case k.msgs <- Message{Message: m.Message, from: under}:
				case <-stop:
					return
				}
			}
		}
	}()
}

func (k *Consumer) broken() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur == nil && !k.closed
}

func (k *Consumer) reattach(pc pulsar.Client) error {
	// As for producers: the old consumer may hold an exclusive
	// subscription in the new cluster after a migration.
	k.mu.Lock()
	old, oldPump := k.cur, k.pump
	k.cur, k.pump = nil, nil
	k.mu.Unlock()
	if oldPump != nil {
		close(oldPump)
	}
	if old != nil {
		k.c.closeWithin(old.Close, oldCloseWait)
	}
	under, err := pc.Subscribe(k.opts)
	if err != nil {
		under = nil // the client returns a typed nil with its error
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		if under != nil {
			under.Close()
		}
		return nil
	}
	k.err = err
	k.mu.Unlock()
	if err != nil {
		return err
	}
	k.attach(under)
	return nil
}

// Receive returns the next message, from whichever cluster is current.
func (k *Consumer) Receive(ctx context.Context) (Message, error) {
	select {
	case m := <-k.msgs:
		return m, nil
	case <-k.stop:
		return Message{}, ErrClosed
	case <-ctx.Done():
		k.mu.Lock()
		err := k.err
		k.mu.Unlock()
		if err != nil {
			return Message{}, fmt.Errorf("%w (consumer not attached: %v)", ctx.Err(), err)
		}
		return Message{}, ctx.Err()
	}
}

// Ack acknowledges m on the consumer that delivered it.
func (k *Consumer) Ack(m Message) error {
	if m.from == nil {
		return errors.New("failover: message not received from this consumer")
	}
	return m.from.Ack(m.Message)
}

// Nack asks for m to be delivered again.
func (k *Consumer) Nack(m Message) {
	if m.from != nil {
		m.from.Nack(m.Message)
	}
}

// Close closes the consumer.
func (k *Consumer) Close() {
	k.c.mu.Lock()
	delete(k.c.consumers, k)
	k.c.mu.Unlock()
	k.close()
}

func (k *Consumer) close() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	under, pump := k.cur, k.pump
	k.cur, k.pump = nil, nil
	k.mu.Unlock()
	close(k.stop)
	if pump != nil {
		close(pump)
	}
	k.wg.Wait()
	if under != nil {
		under.Close()
	}
}

// loop runs check every interval until the client closes.
func (c *Client) loop(interval time.Duration, check func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				check()
				c.repair()
			}
		}
	}()
}
