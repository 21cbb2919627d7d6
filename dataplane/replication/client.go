package replication

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Errors of the client side.
var (
	// ErrClosed: the connection to the remote cluster is gone.
	ErrClosed = errors.New("replication: connection closed")
	// ErrRedirects: a lookup did not settle on a broker.
	ErrRedirects = errors.New("replication: too many lookup redirects")
)

// clientVersion is what CONNECT announces to the remote broker.
const clientVersion = "magnetar-replicator"

// protocolVersion is the binary protocol version the replicator speaks.
const protocolVersion = 19

// DialOptions say how to reach and authenticate with a remote cluster.
type DialOptions struct {
	// TLS, when set, is used for pulsar+ssl:// URLs (and required for them).
	TLS *tls.Config
	// AuthMethod and AuthData are CONNECT's auth_method_name and
	// auth_data ("token" and the JWT, for instance); AuthData is called at
	// every CONNECT and AUTH_CHALLENGE, so a token file may rotate.
	AuthMethod string
	AuthData   func() ([]byte, error)
	// DialTimeout bounds the TCP and TLS handshake and CONNECT (default 10 s).
	DialTimeout time.Duration
	// ProxyURL, when set, carries every connection: each CONNECT names the
	// broker it is meant for in proxy_to_broker_url (Pulsar's proxy and
	// SNI-routing semantics; ClusterData's proxyServiceUrl).
	ProxyURL string
}

// Conn is a client connection to one broker of a remote cluster, enough of
// the binary protocol for a replicator: CONNECT, LOOKUP, PRODUCER, SEND,
// GET_OR_CREATE_SCHEMA, keep-alives and authentication refresh. One
// goroutine reads the socket; writes are serialized by wmu.
type Conn struct {
	nc   net.Conn
	opts DialOptions
	addr string // host:port of the broker
	// broker is the broker a proxied connection is meant for ("" before
	// the first lookup).
	broker string
	// pool, when set, shares the connection (Release gives it back).
	pool *Pool

	wmu sync.Mutex
	bw  *bufio.Writer

	reqID atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]chan *pb.BaseCommand
	err     error

	// producers routes each producer's SEND_RECEIPT, SEND_ERROR and
	// CLOSE_PRODUCER frames, in the order the broker sent them (under mu).
	producers map[uint64]chan *pb.BaseCommand
	prodID    atomic.Uint64
	done      chan struct{}
	wg        sync.WaitGroup
}

// parseServiceURL returns host:port and whether TLS is asked for, from a
// pulsar:// or pulsar+ssl:// URL (the first host of a list).
func parseServiceURL(s string) (addr string, useTLS bool, err error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return "", false, fmt.Errorf("replication: service URL %q: %w", s, err)
	}
	switch u.Scheme {
	case "pulsar":
	case "pulsar+ssl":
		useTLS = true
	default:
		return "", false, fmt.Errorf("replication: service URL %q: scheme must be pulsar or pulsar+ssl", s)
	}
	host, _, _ := strings.Cut(u.Host, ",")
	if host == "" {
		return "", false, fmt.Errorf("replication: service URL %q has no host", s)
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		port := "6650"
		if useTLS {
			port = "6651"
		}
		host = net.JoinHostPort(host, port)
	}
	return host, useTLS, nil
}

// Dial connects to the broker at serviceURL (through opts.ProxyURL when
// set, naming brokerURL as the broker meant) and completes CONNECT.
func Dial(ctx context.Context, serviceURL string, opts DialOptions) (*Conn, error) {
	return dial(ctx, serviceURL, "", opts)
}

func dial(ctx context.Context, serviceURL, brokerURL string, opts DialOptions) (*Conn, error) {
	via := serviceURL
	if opts.ProxyURL != "" {
		via = opts.ProxyURL
	}
	addr, useTLS, err := parseServiceURL(via)
	if err != nil {
		return nil, err
	}
	var broker string
	if opts.ProxyURL != "" && brokerURL != "" {
		if broker, _, err = parseServiceURL(brokerURL); err != nil {
			return nil, err
		}
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("replication: dial %s: %w", addr, err)
	}
	if useTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if opts.TLS != nil {
			cfg = opts.TLS.Clone()
		}
		if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(dctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("replication: TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	c := &Conn{
		nc: nc, opts: opts, addr: addr, broker: broker, bw: bufio.NewWriterSize(nc, 64<<10),
		pending:   map[uint64]chan *pb.BaseCommand{},
		producers: map[uint64]chan *pb.BaseCommand{},
		done:      make(chan struct{}),
	}
	rd := protocol.NewReader(nc)
	if err := c.handshake(dctx, rd); err != nil {
		nc.Close()
		return nil, err
	}
	c.wg.Add(1)
	go c.readLoop(rd)
	return c, nil
}

// handshake sends CONNECT and waits for CONNECTED, before the read loop
// runs.
func (c *Conn) handshake(ctx context.Context, rd *protocol.Reader) error {
	cc := &pb.CommandConnect{ClientVersion: new(clientVersion), ProtocolVersion: new(int32(protocolVersion)),
		FeatureFlags: &pb.FeatureFlags{SupportsAuthRefresh: new(true)}}
	if c.broker != "" {
		cc.ProxyToBrokerUrl = new(c.broker)
	}
	if c.opts.AuthMethod != "" {
		data, err := c.authData()
		if err != nil {
			return err
		}
		cc.AuthMethodName, cc.AuthData = new(c.opts.AuthMethod), data
	}
	if err := c.write(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: cc}, nil); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetReadDeadline(dl)
		defer c.nc.SetReadDeadline(time.Time{})
	}
	f, err := rd.ReadFrame()
	if err != nil {
		return fmt.Errorf("replication: CONNECT to %s: %w", c.addr, err)
	}
	switch f.Cmd.GetType() {
	case pb.BaseCommand_CONNECTED:
		return nil
	case pb.BaseCommand_ERROR:
		e := f.Cmd.GetError()
		return protocol.ErrorForCode(e.GetError(), e.GetMessage())
	}
	return fmt.Errorf("replication: CONNECT to %s answered %v", c.addr, f.Cmd.GetType())
}

func (c *Conn) authData() ([]byte, error) {
	if c.opts.AuthData == nil {
		return nil, nil
	}
	d, err := c.opts.AuthData()
	if err != nil {
		return nil, fmt.Errorf("replication: credentials: %w", err)
	}
	return d, nil
}

// Addr is the host:port connected to (the proxy's, when proxied).
func (c *Conn) Addr() string { return c.addr }

// Done is closed when the connection ends; Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it runs).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Producer registers a new producer id on the connection and returns it
// with the channel its frames (SEND_RECEIPT, SEND_ERROR, CLOSE_PRODUCER)
// arrive on, in order. window bounds the frames that can wait there: the
// producer must have at most that many SENDs unanswered, so the reader
// never waits for it (and never holds up the connection's other
// producers).
func (c *Conn) Producer(window int) (uint64, <-chan *pb.BaseCommand) {
	id := c.prodID.Add(1)
	ch := make(chan *pb.BaseCommand, window+16)
	c.mu.Lock()
	c.producers[id] = ch
	c.mu.Unlock()
	return id, ch
}

// CloseProducer closes a producer on the broker and forgets its id.
func (c *Conn) CloseProducer(ctx context.Context, producerID uint64) error {
	c.mu.Lock()
	delete(c.producers, producerID)
	c.mu.Unlock()
	id := c.reqID.Add(1)
	_, err := c.call(ctx, id, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(),
		CloseProducer: &pb.CommandCloseProducer{ProducerId: new(producerID), RequestId: new(id)}})
	return err
}

// producerOf is the producer id a producer frame is for.
func producerOf(cmd *pb.BaseCommand) uint64 {
	switch cmd.GetType() {
	case pb.BaseCommand_SEND_RECEIPT:
		return cmd.GetSendReceipt().GetProducerId()
	case pb.BaseCommand_SEND_ERROR:
		return cmd.GetSendError().GetProducerId()
	}
	return cmd.GetCloseProducer().GetProducerId()
}

// Release gives a pooled connection back to its pool (which closes it once
// its last user released it); a connection from Dial is closed.
func (c *Conn) Release() {
	if c.pool != nil {
		c.pool.release(c)
		return
	}
	c.Close()
}

// Close ends the connection and waits for its reader.
func (c *Conn) Close() {
	c.fail(ErrClosed)
	c.wg.Wait()
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pend := c.pending
	c.pending = map[uint64]chan *pb.BaseCommand{}
	c.mu.Unlock()
	c.nc.Close()
	close(c.done)
	for _, ch := range pend {
		close(ch)
	}
}

func (c *Conn) write(cmd *pb.BaseCommand, hp []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var err error
	if hp != nil {
		err = protocol.WritePayloadCommand(c.bw, cmd, nil, hp)
	} else {
		err = protocol.WriteCommand(c.bw, cmd)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		err = fmt.Errorf("replication: write to %s: %w", c.addr, err)
		go c.fail(err)
	}
	return err
}

func (c *Conn) readLoop(rd *protocol.Reader) {
	defer c.wg.Done()
	for {
		f, err := rd.ReadFrame()
		if err != nil {
			c.fail(fmt.Errorf("replication: read from %s: %w", c.addr, err))
			return
		}
		cmd := f.Cmd
		switch cmd.GetType() {
		case pb.BaseCommand_PING:
			c.write(protocol.NewPong(), nil)
		case pb.BaseCommand_PONG:
		case pb.BaseCommand_AUTH_CHALLENGE:
			data, err := c.authData()
			if err != nil {
				c.fail(err)
				return
			}
			c.write(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_RESPONSE.Enum(), AuthResponse: &pb.CommandAuthResponse{
				ClientVersion: new(clientVersion), ProtocolVersion: new(int32(protocolVersion)),
				Response: &pb.AuthData{AuthMethodName: new(c.opts.AuthMethod), AuthData: data}}}, nil)
		case pb.BaseCommand_SEND_RECEIPT, pb.BaseCommand_SEND_ERROR, pb.BaseCommand_CLOSE_PRODUCER:
			c.mu.Lock()
			ch := c.producers[producerOf(cmd)]
			c.mu.Unlock()
			if ch == nil {
				continue // a producer closed meanwhile
			}
			select {
			case ch <- cmd:
			default:
				// Its owner sent more than its window: it cannot be
				// trusted to keep up; end the connection rather than
				// stall every producer on it.
				c.fail(errors.New("replication: a producer's frames overflowed its window"))
				return
			}
		default:
			if id, ok := requestID(cmd); ok {
				c.mu.Lock()
				ch := c.pending[id]
				delete(c.pending, id)
				c.mu.Unlock()
				if ch != nil {
					ch <- cmd
				}
			}
		}
	}
}

// requestID is the request id an answer refers to.
func requestID(cmd *pb.BaseCommand) (uint64, bool) {
	switch cmd.GetType() {
	case pb.BaseCommand_LOOKUP_RESPONSE:
		return cmd.GetLookupTopicResponse().GetRequestId(), true
	case pb.BaseCommand_PARTITIONED_METADATA_RESPONSE:
		return cmd.GetPartitionMetadataResponse().GetRequestId(), true
	case pb.BaseCommand_PRODUCER_SUCCESS:
		return cmd.GetProducerSuccess().GetRequestId(), true
	case pb.BaseCommand_SUCCESS:
		return cmd.GetSuccess().GetRequestId(), true
	case pb.BaseCommand_ERROR:
		return cmd.GetError().GetRequestId(), true
	case pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE:
		return cmd.GetGetOrCreateSchemaResponse().GetRequestId(), true
	}
	return 0, false
}

// call sends a request and waits for its answer. PRODUCER_SUCCESS with
// producer_ready=false is followed by another answer; the caller asks for
// it with wait.
func (c *Conn) call(ctx context.Context, id uint64, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	ch := make(chan *pb.BaseCommand, 2)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.write(cmd, nil); err != nil {
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, c.Err()
		}
		if resp.GetType() == pb.BaseCommand_ERROR {
			e := resp.GetError()
			return nil, protocol.ErrorForCode(e.GetError(), e.GetMessage())
		}
		return resp, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Lookup asks the broker which broker owns topic.
func (c *Conn) Lookup(ctx context.Context, topic string, authoritative bool) (*pb.CommandLookupTopicResponse, error) {
	id := c.reqID.Add(1)
	resp, err := c.call(ctx, id, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: new(topic), RequestId: new(id), Authoritative: new(authoritative)}})
	if err != nil {
		return nil, err
	}
	lr := resp.GetLookupTopicResponse()
	if lr.GetResponse() == pb.CommandLookupTopicResponse_Failed {
		return nil, protocol.ErrorForCode(lr.GetError(), lr.GetMessage())
	}
	return lr, nil
}

// PartitionedMetadata returns how many partitions topic has (0: not
// partitioned).
func (c *Conn) PartitionedMetadata(ctx context.Context, topic string) (int, error) {
	id := c.reqID.Add(1)
	resp, err := c.call(ctx, id, &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA.Enum(),
		PartitionMetadata: &pb.CommandPartitionedTopicMetadata{Topic: new(topic), RequestId: new(id),
			MetadataAutoCreationEnabled: new(false)}})
	if err != nil {
		return 0, err
	}
	pm := resp.GetPartitionMetadataResponse()
	if pm.GetResponse() == pb.CommandPartitionedTopicMetadataResponse_Failed {
		return 0, protocol.ErrorForCode(pm.GetError(), pm.GetMessage())
	}
	return int(pm.GetPartitions()), nil
}

// CreateProducer creates a shared producer named name on topic and returns
// the last sequence id the broker has stored for that name (-1: none).
func (c *Conn) CreateProducer(ctx context.Context, topic string, producerID uint64, name string) (int64, error) {
	id := c.reqID.Add(1)
	ch := make(chan *pb.BaseCommand, 2)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, c.err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	err := c.write(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: new(topic), ProducerId: new(producerID), RequestId: new(id), ProducerName: new(name),
		UserProvidedProducerName: new(true)}}, nil)
	if err != nil {
		return 0, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return 0, c.Err()
		}
		if resp.GetType() == pb.BaseCommand_ERROR {
			e := resp.GetError()
			return 0, protocol.ErrorForCode(e.GetError(), e.GetMessage())
		}
		return resp.GetProducerSuccess().GetLastSequenceId(), nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return 0, ctx.Err()
	}
}

// GetOrCreateSchema registers schema on the remote topic (or finds it) and
// returns the remote's version of it.
func (c *Conn) GetOrCreateSchema(ctx context.Context, topic string, schema *pb.Schema) ([]byte, error) {
	id := c.reqID.Add(1)
	resp, err := c.call(ctx, id, &pb.BaseCommand{Type: pb.BaseCommand_GET_OR_CREATE_SCHEMA.Enum(),
		GetOrCreateSchema: &pb.CommandGetOrCreateSchema{RequestId: new(id), Topic: new(topic), Schema: schema}})
	if err != nil {
		return nil, err
	}
	r := resp.GetGetOrCreateSchemaResponse()
	if r.ErrorCode != nil {
		return nil, protocol.ErrorForCode(r.GetErrorCode(), r.GetErrorMessage())
	}
	return r.GetSchemaVersion(), nil
}

// Send writes one SEND; its receipt or error arrives on Events.
func (c *Conn) Send(producerID, seq uint64, numMessages int32, isChunk bool, hp []byte) error {
	s := &pb.CommandSend{ProducerId: new(producerID), SequenceId: new(seq), NumMessages: new(numMessages)}
	if isChunk {
		s.IsChunk = new(true)
	}
	return c.write(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: s}, hp)
}

// markerSequence is the sequence id of marker SENDs: no entry's (the
// ledger id 2^39-1 with the top bit set is never produced by SequenceOf),
// so their receipts never match a data SEND.
const markerSequence = ^uint64(0)

// SendMarker writes a marker SEND (headers and payload hp).
func (c *Conn) SendMarker(producerID uint64, hp []byte) error {
	s := &pb.CommandSend{ProducerId: new(producerID), SequenceId: new(markerSequence), NumMessages: new(int32(1)), Marker: new(true)}
	return c.write(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: s}, hp)
}

func sameBroker(url, addr string) bool {
	a, _, err := parseServiceURL(url)
	return err == nil && a == addr
}
