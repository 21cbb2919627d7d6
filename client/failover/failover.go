package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
//
// Lock order: Client.mu before Producer.mu and Consumer.mu; none is held
// across a call into the Pulsar client.
type Client struct {
	base     pulsar.ClientOptions
	onSwitch func(from, to string)
	// retiredHold is how long a retired client stays open once unused.
	retiredHold time.Duration

	mu        sync.Mutex
	cluster   Cluster
	cur       pulsar.Client
	producers map[*Producer]struct{}
	consumers map[*Consumer]struct{}
	// retired are the clients of earlier clusters, closed by sweepRetired
	// (see the comment above Producer).
	retired []*retiredClient
	// ghostsClosed: when closeGhosts last closed clients of a cluster.
	ghostsClosed map[string]time.Time
	closed       bool

	stop chan struct{}
	wg   sync.WaitGroup
}

func newClient(base pulsar.ClientOptions, first Cluster, onSwitch func(from, to string)) (*Client, error) {
	pc, err := dial(base, first)
	if err != nil {
		return nil, err
	}
	return &Client{base: base, onSwitch: onSwitch, retiredHold: reconnectBound(base), cluster: first, cur: pc,
		producers: map[*Producer]struct{}{}, consumers: map[*Consumer]struct{}{}, stop: make(chan struct{})}, nil
}

// reconnectBound bounds how long a reconnection of a producer or consumer
// under way when it is closed can go on: a lookup (retried for up to the
// operation timeout), a connection, and the PRODUCER or SUBSCRIBE request
// (up to the operation timeout), with the Go client's defaults for unset
// options (30 s and 10 s).
func reconnectBound(o pulsar.ClientOptions) time.Duration {
	op, conn := o.OperationTimeout, o.ConnectionTimeout
	if op <= 0 {
		op = 30 * time.Second
	}
	if conn <= 0 {
		conn = 10 * time.Second
	}
	return 2*op + conn + time.Second
}

// retiredClient is the client of a cluster the Client left.
type retiredClient struct {
	pc      pulsar.Client
	cluster Cluster
	unused  time.Time // since when no producer or consumer uses it; zero while used
}

// defaultProbeTimeout bounds one probe (a TCP connection) of a cluster.
const defaultProbeTimeout = 3 * time.Second

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

// switchTo moves every producer and consumer to cluster to. One that
// cannot be created there yet keeps its predecessor and is retried at
// every provider check (repair).
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
	from := c.cluster.ServiceURL
	c.retired = append(c.retired, &retiredClient{pc: c.cur, cluster: c.cluster})
	c.cur, c.cluster = pc, to
	prods, conss := c.handlesLocked()
	c.mu.Unlock()
	var errs []error
	for _, p := range prods {
		errs = append(errs, p.moveTo(pc))
	}
	for _, k := range conss {
		errs = append(errs, k.moveTo(pc))
	}
	if c.onSwitch != nil {
		c.onSwitch(from, to.ServiceURL)
	}
	return errors.Join(errs...)
}

func (c *Client) handlesLocked() ([]*Producer, []*Consumer) {
	prods := make([]*Producer, 0, len(c.producers))
	for p := range c.producers {
		prods = append(prods, p)
	}
	conss := make([]*Consumer, 0, len(c.consumers))
	for k := range c.consumers {
		conss = append(conss, k)
	}
	return prods, conss
}

// repair moves the producers and consumers that could not be created on
// the current cluster at its switch.
func (c *Client) repair() {
	c.mu.Lock()
	pc := c.cur
	prods, conss := c.handlesLocked()
	c.mu.Unlock()
	for _, p := range prods {
		if p.needsMove(pc) {
			p.moveTo(pc)
		}
	}
	for _, k := range conss {
		if k.needsMove(pc) {
			k.moveTo(pc)
		}
	}
}

// inUseLocked returns the clients producers and consumers are on.
func (c *Client) inUseLocked() map[pulsar.Client]bool {
	inUse := map[pulsar.Client]bool{}
	for p := range c.producers {
		inUse[p.client()] = true
	}
	for k := range c.consumers {
		inUse[k.client()] = true
	}
	return inUse
}

// sweepRetired closes the retired clients no producer or consumer has used
// for retiredHold.
func (c *Client) sweepRetired() {
	now := time.Now()
	c.mu.Lock()
	inUse := c.inUseLocked()
	var done []*retiredClient
	for _, r := range c.retired {
		switch {
		case inUse[r.pc]:
			r.unused = time.Time{}
		case r.unused.IsZero():
			r.unused = now
		case now.Sub(r.unused) >= c.retiredHold:
			done = append(done, r)
		}
	}
	c.mu.Unlock()
	c.closeRetired(done)
}

// closeGhosts closes at once the retired clients of the cluster pc serves
// that no producer or consumer uses. It runs when that cluster refused a
// successor's name as taken: the holder may be a handle of such a client
// that registered after its close. It reports whether the holder may have
// been such a ghost: it closed clients now, or less than ghostSettle ago
// (the broker may not have seen their connections close yet).
func (c *Client) closeGhosts(pc pulsar.Client) bool {
	now := time.Now()
	c.mu.Lock()
	cluster := c.cluster.ServiceURL
	for _, r := range c.retired {
		if r.pc == pc {
			cluster = r.cluster.ServiceURL
		}
	}
	inUse := c.inUseLocked()
	var done []*retiredClient
	for _, r := range c.retired {
		if !inUse[r.pc] && r.cluster.ServiceURL == cluster {
			done = append(done, r)
		}
	}
	if len(done) > 0 {
		if c.ghostsClosed == nil {
			c.ghostsClosed = map[string]time.Time{}
		}
		c.ghostsClosed[cluster] = now
	}
	recent := now.Sub(c.ghostsClosed[cluster]) < ghostSettle
	c.mu.Unlock()
	c.closeRetired(done)
	return recent
}

// ghostSettle is how long after closing a cluster's retired clients a
// taken name there is still put down to their ghosts.
const ghostSettle = 2 * time.Second

// closeRetired drops done from the retired clients and closes them.
func (c *Client) closeRetired(done []*retiredClient) {
	if len(done) == 0 {
		return
	}
	c.mu.Lock()
	c.retired = slices.DeleteFunc(c.retired, func(r *retiredClient) bool { return slices.Contains(done, r) })
	c.mu.Unlock()
	for _, r := range done {
		c.closeWithin(r.pc.Close, oldCloseWait)
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
	pc := c.cur
	c.mu.Unlock()
	under, err := pc.CreateProducer(opts)
	if err != nil {
		return nil, err
	}
	p := &Producer{c: c, opts: opts, cur: under, on: pc, at: pc}
	c.mu.Lock()
	c.producers[p] = struct{}{}
	moved := c.cur != pc
	pc = c.cur
	c.mu.Unlock()
	if moved {
		p.moveTo(pc)
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
	k.attach(under, pc)
	c.mu.Lock()
	c.consumers[k] = struct{}{}
	moved := c.cur != pc
	pc = c.cur
	c.mu.Unlock()
	if moved {
		k.moveTo(pc)
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
	prods, conss := c.handlesLocked()
	c.producers, c.consumers = map[*Producer]struct{}{}, map[*Consumer]struct{}{}
	clients := []pulsar.Client{c.cur}
	for _, r := range c.retired {
		clients = append(clients, r.pc)
	}
	c.retired = nil
	c.mu.Unlock()
	for _, p := range prods {
		p.close()
	}
	for _, k := range conss {
		k.close()
	}
	c.wg.Wait()
	for _, pc := range clients {
		pc.Close()
	}
}

// busy reports whether err is the broker's refusal of a producer name or
// exclusive subscription another client holds.
func busy(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "ProducerBusy") || strings.Contains(err.Error(), "ConsumerBusy"))
}

// A switch replaces a producer or consumer only once its successor exists
// on the new cluster, and closes the predecessor after that. The Go
// client, when a producer or consumer is closed while it reconnects, lets
// the reconnection it has under way register at the broker and never
// closes it there: a ghost that holds the producer's name (or an exclusive
// subscription) until its connection closes. If the client was closed
// already, that connection is one nothing will close. So:
//   - Closing a predecessor first would race its reconnection: a producer
//     of the old cluster follows its topic's migration (PIP-188) to the
//     new one. With the successor in place the predecessor can no longer
//     register where the successor is.
//   - The client of an old cluster is closed only once no handle has used
//     it for longer than a reconnection closed meanwhile can go on
//     (reconnectBound; sweepRetired): a predecessor closed while its
//     cluster was down may still be retrying its lookup there, and
//     registers when the cluster returns. Its ghost is then on a
//     connection of that client, and goes when the client closes; on a
//     client closed before, its connection would be one nothing closes.
//   - When the new cluster refuses the successor because the name is taken
//     (ProducerBusy, or ConsumerBusy for an exclusive subscription), the
//     unused clients of that cluster are closed at once (their ghosts
//     with them) and the successor is tried again at the next check; with
//     none left, the holder is the predecessor, which followed the
//     migration there, and it stays.

// Producer is a producer that follows the client's cluster.
type Producer struct {
	c    *Client
	opts pulsar.ProducerOptions

	mu  sync.Mutex
	cur pulsar.Producer
	on  pulsar.Client // the client cur was created on
	// at is the client whose cluster cur serves: on, or the client of the
	// cluster cur's topic migrated to.
	at     pulsar.Client
	epoch  uint64 // bumped whenever cur is replaced
	err    error  // why no successor could be created on the current cluster
	closed bool
}

func (p *Producer) needsMove(pc pulsar.Client) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && p.at != pc
}

func (p *Producer) client() pulsar.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.on
}

// moveTo creates the producer's successor on pc and then closes the
// predecessor.
func (p *Producer) moveTo(pc pulsar.Client) error {
	under, err := pc.CreateProducer(p.opts)
	ghosts := busy(err) && p.c.closeGhosts(pc)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		if err == nil {
			under.Close()
		}
		return nil
	}
	var old pulsar.Producer
	switch {
	case err == nil:
		old = p.cur
		p.cur, p.on, p.at, p.err = under, pc, pc, nil
		p.epoch++
	case busy(err) && !ghosts:
		p.at, p.err = pc, nil
		err = nil
	default:
		p.err = err
	}
	p.mu.Unlock()
	if old != nil {
		p.c.closeWithin(old.Close, oldCloseWait)
	}
	return err
}

// oldCloseWait bounds how long a switch waits for a producer, consumer or
// client of the old cluster to close (the old cluster may be unreachable;
// the close then goes on in the background).
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
	if p.closed {
		return nil, 0, ErrClosed
	}
	return p.cur, p.epoch, nil
}

// Send sends msg on the current cluster; a send that fails because its
// producer was replaced (a switch) is retried on the successor.
func (p *Producer) Send(ctx context.Context, msg *pulsar.ProducerMessage) (pulsar.MessageID, error) {
	for attempt := 0; ; attempt++ {
		under, epoch, err := p.current()
		if err != nil {
			return nil, err
		}
		id, err := under.Send(ctx, msg)
		if err == nil {
			return id, nil
		}
		if attempt >= MaxSwitchRetries || ctx.Err() != nil || !p.replacedSince(epoch) {
			return nil, p.explain(err)
		}
	}
}

// SendAsync sends msg on the current cluster and calls cb once with the
// outcome; a send that fails because its producer was replaced (a switch)
// is retried on the successor.
func (p *Producer) SendAsync(ctx context.Context, msg *pulsar.ProducerMessage, cb func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
	p.sendAsync(ctx, msg, cb, 0)
}

func (p *Producer) sendAsync(ctx context.Context, msg *pulsar.ProducerMessage, cb func(pulsar.MessageID, *pulsar.ProducerMessage, error), attempt int) {
	under, epoch, err := p.current()
	if err != nil {
		cb(nil, msg, err)
		return
	}
	under.SendAsync(ctx, msg, func(id pulsar.MessageID, m *pulsar.ProducerMessage, err error) {
		if err != nil && attempt < MaxSwitchRetries && ctx.Err() == nil && p.replacedSince(epoch) {
			p.sendAsync(ctx, msg, cb, attempt+1)
			return
		}
		cb(id, m, p.explain(err))
	})
}

// replacedSince reports whether the producer was replaced since epoch.
func (p *Producer) replacedSince(epoch uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch != epoch
}

// explain adds to a send error why the current cluster has no producer of
// its own yet, if it has none.
func (p *Producer) explain(err error) error {
	if err == nil {
		return nil
	}
	p.mu.Lock()
	why := p.err
	p.mu.Unlock()
	if why != nil {
		return fmt.Errorf("%w (failover: no producer on %s yet: %v)", err, p.c.ServiceURL(), why)
	}
	return err
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
	on     pulsar.Client // the client cur was created on
	at     pulsar.Client // the client whose cluster cur serves (see Producer.at)
	pump   chan struct{} // closed to stop the current pump
	err    error         // why no successor could be created on the current cluster
	closed bool
	wg     sync.WaitGroup
}

// attach makes under, created on pc, current and starts its pump.
func (k *Consumer) attach(under pulsar.Consumer, pc pulsar.Client) {
	stop := make(chan struct{})
	k.mu.Lock()
	k.cur, k.on, k.at, k.pump, k.err = under, pc, pc, stop, nil
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

func (k *Consumer) needsMove(pc pulsar.Client) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.closed && k.at != pc
}

func (k *Consumer) client() pulsar.Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.on
}

// moveTo subscribes the consumer's successor on pc, then stops and closes
// the predecessor (see the comment above Producer).
func (k *Consumer) moveTo(pc pulsar.Client) error {
	under, err := pc.Subscribe(k.opts)
	ghosts := busy(err) && k.c.closeGhosts(pc)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		if err == nil {
			under.Close()
		}
		return nil
	}
	switch {
	case err == nil:
	case busy(err) && !ghosts:
		k.at, k.err = pc, nil
		k.mu.Unlock()
		return nil
	default:
		k.err = err
		k.mu.Unlock()
		return err
	}
	old, oldPump := k.cur, k.pump
	k.cur, k.pump = nil, nil
	k.mu.Unlock()
	if oldPump != nil {
		close(oldPump)
	}
	k.attach(under, pc)
	if old != nil {
		k.c.closeWithin(old.Close, oldCloseWait)
	}
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
			return Message{}, fmt.Errorf("%w (failover: no consumer on %s yet: %v)", ctx.Err(), k.c.ServiceURL(), err)
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
				c.sweepRetired()
			}
		}
	}()
}
