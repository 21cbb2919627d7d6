package broker

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarwire"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// serverVersion is announced in CONNECTED.
const serverVersion = "Magnetar"

// maxProtocolVersion is the highest protocol version the broker speaks.
const maxProtocolVersion = 21

// conn is one client connection. Its reader goroutine (serve) owns the
// producer and consumer maps; a writer goroutine drains the outbound queue
// so no topic or subscription ever blocks on a slow socket.
type conn struct {
	s  *Service
	nc net.Conn

	// Set once by CONNECT, read-only afterwards.
	clientVersion string
	connectedAt   time.Time
	// authCache holds authorization decisions (authz.go); reader-owned.
	authCache map[authKey]authDecision

	// Owned by the reader goroutine.
	connected bool
	producers map[uint64]*Producer
	consumers map[uint64]*Consumer
	lastRead  time.Time

	mu      sync.Mutex
	cond    *sync.Cond
	out     []outFrame
	closed  bool
	closeCh chan struct{}
	// sendSlots holds one token per SEND read and not yet answered
	// (backpressure.go); its capacity is MaxPendingPublishPerConnection.
	sendSlots chan struct{}
	lastIn    time.Time // guarded by mu, for keep-alive
	// ident is who authenticated (authz.go); challenged is when an
	// AUTH_CHALLENGE went unanswered so far. Guarded by mu.
	ident      auth.Identity
	challenged time.Time
	// throttled is set while the reader pauses for a publish rate limit
	// (backpressure.go); the keep-alive does not count that as silence.
	throttled atomic.Bool
	wg        sync.WaitGroup
	log       interface{ Warn(string, ...any) }
}

type outFrame struct {
	cmd       *pb.BaseCommand
	payload   []byte // headers and payload for MESSAGE
	ackSet    []int64
	isReceipt bool        // the frame is receipt, not cmd
	receipt   sendReceipt // when isReceipt
}

// sendReceipt is a SEND_RECEIPT queued by value: the writer encodes it
// straight into its buffer (protocol.WriteSendReceipt), so acknowledging a
// message allocates nothing.
type sendReceipt struct {
	producerID, sequenceID, highestSequenceID, ledgerID, entryID uint64
}

func newConn(s *Service, nc net.Conn) *conn {
	c := &conn{
		s: s, nc: nc,
		producers: map[uint64]*Producer{},
		consumers: map[uint64]*Consumer{},
		closeCh:   make(chan struct{}),
		sendSlots: make(chan struct{}, s.cfg.MaxPendingPublishPerConnection),
		lastIn:    time.Now(),
	}
	c.cond = sync.NewCond(&c.mu)
	c.log = s.log.With("remote", nc.RemoteAddr().String())
	return c
}

// send queues a command for the writer. It never blocks on the socket.
func (c *conn) send(cmd *pb.BaseCommand) { c.sendFrame(outFrame{cmd: cmd}) }

func (c *conn) sendFrame(f outFrame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.out = append(c.out, f)
	c.cond.Signal()
}

// close shuts the connection; the reader and writer goroutines exit.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.closeCh)
	c.cond.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
	c.s.pending.wakeAll()
}

func (c *conn) writer() {
	defer c.wg.Done()
	w := bufio.NewWriterSize(c.nc, 64<<10)
	var batch []outFrame
	for {
		c.mu.Lock()
		for len(c.out) == 0 && !c.closed {
			c.cond.Wait()
		}
		if c.closed {
			c.mu.Unlock()
			return
		}
		batch, c.out = c.out, batch[:0]
		c.mu.Unlock()
		for i, f := range batch {
			var err error
			switch {
			case f.isReceipt:
				r := &f.receipt
				err = protocol.WriteSendReceipt(w, r.producerID, r.sequenceID, r.highestSequenceID, r.ledgerID, r.entryID)
			case f.payload != nil:
				err = protocol.WritePayloadCommand(w, f.cmd, nil, f.payload)
			default:
				err = protocol.WriteCommand(w, f.cmd)
			}
			batch[i] = outFrame{}
			if err != nil {
				c.log.Warn("broker write failed", "err", err)
				c.close()
				return
			}
		}
		if err := w.Flush(); err != nil {
			c.close()
			return
		}
	}
}

// keepAlive pings a silent client and closes the connection after twice
// the interval without anything received.
func (c *conn) keepAlive() {
	defer c.wg.Done()
	iv := c.s.cfg.KeepAliveInterval
	if iv <= 0 {
		return
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-c.closeCh:
			return
		case <-t.C:
		}
		c.mu.Lock()
		idle := time.Since(c.lastIn)
		c.mu.Unlock()
		if c.throttled.Load() {
			continue // the broker is not reading: the client is not silent
		}
		switch {
		case idle > 2*iv:
			c.log.Warn("broker closing silent connection", "idle", idle)
			c.close()
			return
		case idle > iv:
			c.send(protocol.NewPing())
		}
	}
}

// serve runs the reader loop until the connection ends, then releases
// every producer and consumer of the connection.
func (c *conn) serve() {
	c.wg.Add(2)
	go c.writer()
	go c.keepAlive()
	defer func() {
		c.close()
		c.wg.Wait()
		c.cleanup()
	}()
	r := protocol.NewReader(c.nc, protocol.WithMaxFrameSize(c.s.cfg.MaxMessageSize+protocol.FrameHeadroom))
	var f protocol.Frame
	for {
		if err := r.ReadFrameInto(&f); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				select {
				case <-c.closeCh:
				default:
					c.log.Warn("broker closing connection after bad frame", "err", err)
					code, msg := protocol.ServerErrorOf(err)
					c.send(protocol.NewError(0, code, msg))
					c.flushAndClose()
				}
			}
			return
		}
		c.mu.Lock()
		c.lastIn = time.Now()
		c.mu.Unlock()
		if err := c.handle(f); err != nil {
			c.log.Warn("broker closing connection", "err", err)
			return
		}
	}
}

// flushAndClose gives the writer a moment to send queued frames (an error
// reply) before the connection is closed.
func (c *conn) flushAndClose() {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		empty := len(c.out) == 0
		c.mu.Unlock()
		if empty {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.close()
}

func (c *conn) cleanup() {
	for _, p := range c.producers {
		p.topic.removeProducer(p)
	}
	for _, cons := range c.consumers {
		cons.sub.removeConsumer(cons)
	}
	c.producers, c.consumers = nil, nil
}

// ctx returns a context for a request, canceled when the connection ends.
func (c *conn) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	go func() {
		select {
		case <-c.closeCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// handle executes one command. A returned error closes the connection.
func (c *conn) handle(f protocol.Frame) error {
	cmd := f.Cmd
	if !c.connected && cmd.GetType() != pb.BaseCommand_CONNECT {
		return errors.New("command before CONNECT")
	}
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		return c.handleConnect(cmd.GetConnect())
	case pb.BaseCommand_PING:
		c.send(protocol.NewPong())
	case pb.BaseCommand_PONG:
	case pb.BaseCommand_LOOKUP:
		c.handleLookup(cmd.GetLookupTopic())
	case pb.BaseCommand_PARTITIONED_METADATA:
		c.handlePartitionedMetadata(cmd.GetPartitionMetadata())
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE:
		c.handleGetTopicsOfNamespace(cmd.GetGetTopicsOfNamespace())
	case pb.BaseCommand_PRODUCER:
		c.handleProducer(cmd.GetProducer())
	case pb.BaseCommand_SEND:
		return c.handleSend(cmd.GetSend(), f.HeadersAndPayload)
	case pb.BaseCommand_CLOSE_PRODUCER:
		c.handleCloseProducer(cmd.GetCloseProducer())
	case pb.BaseCommand_SUBSCRIBE:
		c.handleSubscribe(cmd.GetSubscribe())
	case pb.BaseCommand_FLOW:
		c.handleFlow(cmd.GetFlow())
	case pb.BaseCommand_ACK:
		c.handleAck(cmd.GetAck())
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		c.handleRedeliver(cmd.GetRedeliverUnacknowledgedMessages())
	case pb.BaseCommand_CLOSE_CONSUMER:
		c.handleCloseConsumer(cmd.GetCloseConsumer())
	case pb.BaseCommand_UNSUBSCRIBE:
		c.handleUnsubscribe(cmd.GetUnsubscribe())
	case pb.BaseCommand_SEEK:
		c.handleSeek(cmd.GetSeek())
	case pb.BaseCommand_GET_LAST_MESSAGE_ID:
		c.handleGetLastMessageID(cmd.GetGetLastMessageId())
	case pb.BaseCommand_GET_SCHEMA:
		c.handleGetSchema(cmd.GetGetSchema())
	case pb.BaseCommand_GET_OR_CREATE_SCHEMA:
		c.handleGetOrCreateSchema(cmd.GetGetOrCreateSchema())
	case pb.BaseCommand_AUTH_RESPONSE:
		return c.handleAuthResponse(cmd.GetAuthResponse())
	case pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST:
		r := cmd.GetTcClientConnectRequest()
		c.send(&pb.BaseCommand{Type: pb.BaseCommand_TC_CLIENT_CONNECT_RESPONSE.Enum(),
			TcClientConnectResponse: &pb.CommandTcClientConnectResponse{
				RequestId: proto.Uint64(r.GetRequestId()),
				Error:     pb.ServerError_NotAllowedError.Enum(),
				Message:   proto.String("Transactions are not enabled"),
			}})
	default:
		// Unknown or unsupported command: answer with an error when it
		// carries a request id we can find, else just log it.
		c.log.Warn("broker unsupported command", "type", cmd.GetType().String())
		c.send(protocol.NewError(requestIDOf(cmd), pb.ServerError_NotAllowedError,
			"command "+cmd.GetType().String()+" is not supported"))
	}
	return nil
}

// requestIDOf digs the request id out of a command, or 0.
func requestIDOf(cmd *pb.BaseCommand) uint64 {
	type hasReq interface{ GetRequestId() uint64 }
	m := cmd.ProtoReflect()
	var id uint64
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() != nil {
			if r, ok := v.Message().Interface().(hasReq); ok {
				id = r.GetRequestId()
				return false
			}
		}
		return true
	})
	return id
}

func (c *conn) handleConnect(cc *pb.CommandConnect) error {
	if c.connected {
		return errors.New("second CONNECT")
	}
	if err := c.authenticate(cc); err != nil {
		c.s.metrics.authFailures.Inc()
		c.log.Warn("broker refused connection: authentication failed", "method", cc.GetAuthMethodName(), "err", err)
		code, msg := pb.ServerError_AuthenticationError, err.Error()
		var ae *auth.Error
		if !errors.As(err, &ae) {
			code, msg = pb.ServerError_AuthenticationError, "authentication failed"
		}
		c.send(protocol.NewError(0, code, msg))
		c.flushAndClose()
		return err
	}
	c.connected = true
	c.clientVersion, c.connectedAt = cc.GetClientVersion(), time.Now()
	ver := min(cc.GetProtocolVersion(), maxProtocolVersion)
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
		ServerVersion:   proto.String(serverVersion),
		ProtocolVersion: proto.Int32(ver),
		MaxMessageSize:  proto.Int32(int32(c.s.cfg.MaxMessageSize)),
		FeatureFlags:    &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true)},
	}})
	return nil
}

func (c *conn) sendError(reqID uint64, err error) {
	code, msg := protocol.ServerErrorOf(err)
	c.send(protocol.NewError(reqID, code, msg))
}

func (c *conn) handleLookup(l *pb.CommandLookupTopic) {
	reqID := l.GetRequestId()
	resp := &pb.CommandLookupTopicResponse{RequestId: proto.Uint64(reqID)}
	ctx, cancel := c.ctx()
	defer cancel()
	var res LookupResult
	tn, err := ParseTopicName(l.GetTopic())
	if err != nil {
		err = protocol.ErrInvalidTopicName.WithMessage(err.Error())
	} else if err = c.authorize(ctx, auth.ActionLookup, tn, ""); err == nil {
		res, err = c.s.Lookup(ctx, l.GetTopic(), l.GetAuthoritative())
	}
	switch {
	case err != nil:
		code, msg := protocol.ServerErrorOf(err)
		resp.Response = pb.CommandLookupTopicResponse_Failed.Enum()
		resp.Error = code.Enum()
		resp.Message = proto.String(msg)
	case res.Redirect:
		// The client asks the named broker again, authoritatively; that
		// broker then takes the bundle.
		resp.Response = pb.CommandLookupTopicResponse_Redirect.Enum()
		resp.BrokerServiceUrl = proto.String(res.BrokerURL)
		resp.BrokerServiceUrlTls = proto.String(res.BrokerURLTLS)
		resp.Authoritative = proto.Bool(true)
	default:
		resp.Response = pb.CommandLookupTopicResponse_Connect.Enum()
		resp.BrokerServiceUrl = proto.String(res.BrokerURL)
		resp.BrokerServiceUrlTls = proto.String(res.BrokerURLTLS)
		resp.Authoritative = proto.Bool(true)
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: resp})
}

func (c *conn) handlePartitionedMetadata(m *pb.CommandPartitionedTopicMetadata) {
	reqID := m.GetRequestId()
	resp := &pb.CommandPartitionedTopicMetadataResponse{RequestId: proto.Uint64(reqID)}
	ctx, cancel := c.ctx()
	defer cancel()
	if tn, perr := ParseTopicName(m.GetTopic()); perr == nil {
		if err := c.authorize(ctx, auth.ActionLookup, tn, ""); err != nil {
			code, msg := protocol.ServerErrorOf(err)
			resp.Response = pb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
			resp.Error, resp.Message = code.Enum(), proto.String(msg)
			c.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: resp})
			return
		}
	}
	n, err := c.s.partitionsForClient(ctx, m.GetTopic())
	if err == errTransactionsDisabled { // identity: other NotAllowed errors fail the response as usual
		// A command error (not a failed metadata response) carries the
		// message to the client, as Pulsar's broker does here.
		c.sendError(reqID, err)
		return
	}
	if err != nil {
		code, msg := protocol.ServerErrorOf(err)
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Failed.Enum()
		resp.Error, resp.Message = code.Enum(), proto.String(msg)
	} else {
		resp.Response = pb.CommandPartitionedTopicMetadataResponse_Success.Enum()
		resp.Partitions = proto.Uint32(uint32(n))
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: resp})
}

func (c *conn) handleGetTopicsOfNamespace(g *pb.CommandGetTopicsOfNamespace) {
	reqID := g.GetRequestId()
	ctx, cancel := c.ctx()
	defer cancel()
	if tenant, ns, ok := strings.Cut(g.GetNamespace(), "/"); ok {
		if err := c.authorize(ctx, auth.ActionConsume, TopicName{Domain: Persistent, Tenant: tenant, Namespace: ns}, ""); err != nil {
			c.sendError(reqID, err)
			return
		}
	}
	topics, err := c.s.topicsOfNamespace(ctx, g.GetNamespace(), g.GetMode())
	if err != nil {
		c.sendError(reqID, err)
		return
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(),
		GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{
			RequestId: proto.Uint64(reqID),
			Topics:    topics,
			Filtered:  proto.Bool(false),
			Changed:   proto.Bool(true),
		}})
}

// connectedSince formats the CONNECT time as Pulsar's stats do.
func (c *conn) connectedSince() string {
	if c == nil || c.connectedAt.IsZero() {
		return ""
	}
	return c.connectedAt.UTC().Format(time.RFC3339Nano)
}
