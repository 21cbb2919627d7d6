package pf

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
	"github.com/magnetar-dev/magnetar/client/functions/internal/conf"
	"github.com/magnetar-dev/magnetar/client/functions/internal/logsink"
	"github.com/magnetar-dev/magnetar/client/functions/internal/state"
)

// The properties every output message carries, naming the input message it
// was computed from. The worker's trigger endpoint finds a triggered
// message's output by them, as Pulsar's Java instance sets them.
const (
	propInputTopic = "__pfn_input_topic__"
	propInputMsgID = "__pfn_input_msg_id__"
)

const (
	operationTimeout  = 30 * time.Second
	connectionTimeout = 10 * time.Second
	// closeTimeout bounds flushing the producers at shutdown; the worker
	// kills a process that has not exited about 10 s after SIGTERM.
	closeTimeout = 5 * time.Second
	// serverStopTimeout bounds the graceful stop of the gRPC and metrics
	// servers.
	serverStopTimeout = 2 * time.Second
	// defaultBatchingDelay is the producers' batching delay when the
	// function's producer spec sets none, as in Pulsar's instances.
	defaultBatchingDelay = 10 * time.Millisecond
)

// errHealthCheck ends an instance the worker stopped checking on.
var errHealthCheck = errors.New("no health check from the worker")

// instance runs one function instance: consumers on the input topics, the
// function called on each message in turn, outputs published and inputs
// acknowledged by the processing guarantee, InstanceControl and metrics
// served. run owns every goroutine it starts and stops them before it
// returns.
//
// Lock order: instance.mu, then stats.mu (stats never calls out).
type instance struct {
	cfg   *conf.Instance
	fn    handler
	fc    *FunctionContext
	log   *slog.Logger
	stats *stats
	reg   *prometheus.Registry

	grpcLis, metricsLis net.Listener
	grpc                *grpc.Server
	metricsSrv          *http.Server
	servers             sync.WaitGroup

	client    pulsar.Client
	consumers []pulsar.Consumer
	msgs      chan pulsar.ConsumerMessage
	// sink publishes the function's output; nil without an output topic and
	// under EFFECTIVELY_ONCE (which publishes through one producer per input
	// partition).
	sink    pulsar.Producer
	logProd pulsar.Producer

	mu        sync.Mutex
	producers map[string]pulsar.Producer // guarded by mu: NewOutputMessage's by topic, EFFECTIVELY_ONCE's by "eo:"+input topic
	closing   bool                       // guarded by mu: no new producers

	// lastHealth is when HealthCheck was last called (or the instance
	// started), in Unix nanoseconds.
	lastHealth atomic.Int64
}

func newInstance(cfg *conf.Instance, fn handler, log *slog.Logger) (*instance, error) {
	st, err := newStateClient(cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	d := cfg.Details
	stats, err := newStats(reg, metricLabels(d.Tenant, d.Namespace, d.Name, cfg.InstanceID, cfg.ClusterName))
	if err != nil {
		return nil, err
	}
	i := &instance{
		cfg: cfg, fn: fn, log: log, stats: stats, reg: reg,
		fc:        newFunctionContext(cfg, st),
		msgs:      make(chan pulsar.ConsumerMessage),
		producers: map[string]pulsar.Producer{},
	}
	i.fc.producer = i.outputProducer
	i.fc.metric = stats.recordUser
	i.lastHealth.Store(time.Now().UnixNano())
	return i, nil
}

func newStateClient(cfg *conf.Instance) (*state.Client, error) {
	tok, err := cfg.TokenSource()
	if err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.HTTPTLSConfig()
	if err != nil {
		return nil, err
	}
	d := cfg.Details
	return state.New(state.Config{
		BaseURL: cfg.StateStorageServiceURL, Tenant: d.Tenant, Namespace: d.Namespace, Name: d.Name,
		Token: tok, TLS: tlsCfg,
	}), nil
}

// run serves, connects and processes until ctx ends (nil), the instance has
// been idle for killAfterIdleMs (nil) or the worker stopped checking on it
// (errHealthCheck), then closes everything it opened.
func (i *instance) run(ctx context.Context) error {
	if err := i.listen(); err != nil {
		return err
	}
	i.serve()
	defer i.stopServers()
	defer i.closePulsar()
	if err := i.connect(ctx); err != nil {
		return err
	}
	d := i.cfg.Details
	i.log.Info("instance started", "fqfn", i.cfg.FQFN(), "instance", i.cfg.InstanceID,
		"inputs", i.fc.inputTopics, "output", d.Sink.Topic, "guarantee", d.ProcessingGuarantees.String(),
		"subscription", i.cfg.SubscriptionName(), "port", i.cfg.Port, "metricsPort", i.cfg.MetricsPort)
	return i.loop(ctx)
}

func (i *instance) loop(ctx context.Context) error {
	window := time.NewTicker(time.Minute)
	defer window.Stop()
	var healthC <-chan time.Time
	hc := i.cfg.HealthCheckInterval()
	if hc > 0 {
		t := time.NewTicker(hc)
		defer t.Stop()
		healthC = t.C
	}
	var idleC <-chan time.Time
	idle := i.cfg.KillAfterIdle()
	var idleTimer *time.Timer
	if idle > 0 {
		idleTimer = time.NewTimer(idle)
		defer idleTimer.Stop()
		idleC = idleTimer.C
	}
	for {
		select {
		case <-ctx.Done():
			i.log.Info("stopping", "reason", context.Cause(ctx))
			return nil
		case cm := <-i.msgs:
			if ctx.Err() != nil {
				continue // stopping: leave it unacknowledged, for redelivery
			}
			i.process(ctx, cm)
			if idleTimer != nil {
				idleTimer.Reset(idle)
			}
		case <-window.C:
			i.stats.resetWindow()
		case now := <-healthC:
			if since := now.Sub(time.Unix(0, i.lastHealth.Load())); since > 3*hc {
				return fmt.Errorf("%w for %s (expected every %s); stopping", errHealthCheck, since.Round(time.Second), hc)
			}
		case <-idleC:
			i.log.Info("stopping", "reason", "no message for killAfterIdleMs", "idle", idle)
			return nil
		}
	}
}

// process runs the function on one message and acknowledges it as the
// processing guarantee says:
//
//	ATMOST_ONCE       ack on receipt, before the function runs
//	ATLEAST_ONCE      ack once the output is published (at once without output); nack on error
//	EFFECTIVELY_ONCE  as ATLEAST_ONCE, the output carrying a sequence id derived from the input position
//	MANUAL            neither ack nor nack
func (i *instance) process(ctx context.Context, cm pulsar.ConsumerMessage) {
	msg := cm.Message
	now := time.Now()
	i.stats.received(now)
	g := i.cfg.Details.ProcessingGuarantees
	ackAfter := g == pb.ProcessingGuarantees_ATLEAST_ONCE || g == pb.ProcessingGuarantees_EFFECTIVELY_ONCE
	if g == pb.ProcessingGuarantees_ATMOST_ONCE {
		i.ack(cm)
	}

	i.fc.SetCurrentRecord(msg)
	out, err := i.fn(NewContext(ctx, i.fc), msg.Payload())
	i.stats.latency(time.Since(now))
	if err != nil {
		i.stats.userException(err, time.Now())
		var pe *PanicError
		if errors.As(err, &pe) {
			i.log.Error("function panicked", "topic", msg.Topic(), "id", msg.ID().String(), "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		} else {
			i.log.Warn("function returned an error", "topic", msg.Topic(), "id", msg.ID().String(), "err", err)
		}
		if ackAfter {
			cm.Consumer.Nack(msg)
		}
		return
	}
	if out == nil || i.cfg.Details.Sink.Topic == "" {
		if ackAfter {
			i.ack(cm)
		}
		i.stats.processed()
		return
	}
	i.publish(ctx, cm, out, ackAfter)
}

// publish sends the output of msg and settles msg when the broker answers.
func (i *instance) publish(ctx context.Context, cm pulsar.ConsumerMessage, out []byte, ackAfter bool) {
	msg := cm.Message
	pm := &pulsar.ProducerMessage{
		Payload: out,
		Key:     msg.Key(),
		Properties: map[string]string{
			propInputTopic: msg.Topic(),
			propInputMsgID: base64.StdEncoding.EncodeToString(msg.ID().Serialize()),
		},
	}
	p := i.sink
	if i.cfg.Details.ProcessingGuarantees == pb.ProcessingGuarantees_EFFECTIVELY_ONCE {
		seq, ok := sequenceID(msg.ID())
		if !ok {
			i.failMessage(cm, ackAfter, fmt.Errorf("effectively-once: input position %s does not fit a sequence id", msg.ID()))
			return
		}
		pm.SequenceID = &seq
		var err error
		if p, err = i.effectivelyOnceProducer(msg.Topic()); err != nil {
			i.failMessage(cm, ackAfter, err)
			return
		}
	}
	p.SendAsync(ctx, pm, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
		if err != nil {
			i.failMessage(cm, ackAfter, fmt.Errorf("publish to %s: %w", i.cfg.Details.Sink.Topic, err))
			return
		}
		if ackAfter {
			i.ack(cm)
		}
		i.stats.processed()
	})
}

// failMessage counts a system exception for cm and hands it back for redelivery.
func (i *instance) failMessage(cm pulsar.ConsumerMessage, nack bool, err error) {
	i.stats.sysException(err, time.Now())
	i.log.Error("message failed", "topic", cm.Message.Topic(), "id", cm.Message.ID().String(), "err", err)
	if nack {
		cm.Consumer.Nack(cm.Message)
	}
}

func (i *instance) ack(cm pulsar.ConsumerMessage) {
	if err := cm.Consumer.Ack(cm.Message); err != nil {
		i.log.Warn("acknowledge failed", "topic", cm.Message.Topic(), "id", cm.Message.ID().String(), "err", err)
	}
}

// sequenceID maps an input position to the output's sequence id under
// EFFECTIVELY_ONCE: ledger id in bits 63-32, entry id in bits 31-12, batch
// index in bits 11-0, so the ids of one input partition increase with its
// positions, batched messages included. ok is false for a position that
// does not fit (ledger id >= 2^31, entry id >= 2^20, batch index >= 2^12).
func sequenceID(id pulsar.MessageID) (seq int64, ok bool) {
	l, e, b := id.LedgerID(), id.EntryID(), int64(id.BatchIdx())
	if b < 0 {
		b = 0
	}
	if l < 0 || l >= 1<<31 || e < 0 || e >= 1<<20 || b >= 1<<12 {
		return 0, false
	}
	return l<<32 | e<<12 | b, true
}

// connect creates the client, the producers and the consumers.
func (i *instance) connect(ctx context.Context) error {
	auth, err := i.cfg.PulsarAuth()
	if err != nil {
		return err
	}
	lvl := slog.LevelWarn
	if i.log.Enabled(ctx, slog.LevelDebug) {
		lvl = slog.LevelDebug
	}
	i.client, err = pulsar.NewClient(pulsar.ClientOptions{
		URL:                        i.cfg.PulsarServiceURL,
		Authentication:             auth,
		TLSTrustCertsFilePath:      i.cfg.TLSTrustCertsFilePath,
		TLSAllowInsecureConnection: i.cfg.TLSAllowInsecureConnection,
		TLSValidateHostname:        i.cfg.TLSHostnameVerificationEnable,
		OperationTimeout:           operationTimeout,
		ConnectionTimeout:          connectionTimeout,
		Logger:                     plog.NewLoggerWithSlog(slog.New(levelFilter{i.log.Handler(), lvl}).With("component", "pulsar-client")),
	})
	if err != nil {
		return fmt.Errorf("pulsar client for %s: %w", i.cfg.PulsarServiceURL, err)
	}
	d := i.cfg.Details
	if t := d.Sink.Topic; t != "" && d.ProcessingGuarantees != pb.ProcessingGuarantees_EFFECTIVELY_ONCE {
		opts := i.producerOptions(t)
		if i.sink, err = i.client.CreateProducer(opts); err != nil {
			return fmt.Errorf("producer on output topic %s at %s: %w", t, i.cfg.PulsarServiceURL, err)
		}
	}
	if t := d.LogTopic; t != "" {
		opts := i.producerOptions(t)
		opts.DisableBlockIfQueueFull = true // logging never waits for the broker
		opts.BatchingMaxPublishDelay = 100 * time.Millisecond
		opts.Properties = map[string]string{"function": i.cfg.FQFN()}
		if i.logProd, err = i.client.CreateProducer(opts); err != nil {
			return fmt.Errorf("producer on log topic %s at %s: %w", t, i.cfg.PulsarServiceURL, err)
		}
		p := i.logProd
		logsink.Set(func(line []byte) {
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: append([]byte(nil), line...)}, func(pulsar.MessageID, *pulsar.ProducerMessage, error) {})
		})
	}
	for _, in := range i.cfg.Inputs {
		c, err := i.client.Subscribe(i.consumerOptions(in))
		if err != nil {
			return fmt.Errorf("subscribe %s to %s at %s: %w", i.cfg.SubscriptionName(), in.Topic, i.cfg.PulsarServiceURL, err)
		}
		i.consumers = append(i.consumers, c)
	}
	return nil
}

func (i *instance) consumerOptions(in conf.Input) pulsar.ConsumerOptions {
	d := i.cfg.Details
	o := pulsar.ConsumerOptions{
		SubscriptionName: i.cfg.SubscriptionName(),
		Properties:       i.clientProperties(),
		MessageChannel:   i.msgs,
	}
	if in.Spec.IsRegexPattern {
		o.TopicsPattern = in.Topic
	} else {
		o.Topic = in.Topic
	}
	switch d.Source.SubscriptionType {
	case pb.SubscriptionType_FAILOVER:
		o.Type = pulsar.Failover
	case pb.SubscriptionType_KEY_SHARED:
		o.Type = pulsar.KeyShared
	default:
		o.Type = pulsar.Shared
	}
	if d.Source.SubscriptionPosition == pb.SubscriptionPosition_EARLIEST {
		o.SubscriptionInitialPosition = pulsar.SubscriptionPositionEarliest
	}
	if q := in.Spec.GetReceiverQueueSize().GetValue(); q > 0 {
		o.ReceiverQueueSize = int(q)
	}
	if ms := d.Source.NegativeAckRedeliveryDelayMs; ms > 0 {
		o.NackRedeliveryDelay = time.Duration(ms) * time.Millisecond
	}
	// maxMessageRetries counts redeliveries, as in Pulsar's Java instance:
	// the function sees a message at most 1+retries times before it goes to
	// the dead-letter topic (default <topic>-<subscription>-DLQ).
	if r := d.RetryDetails; r != nil && r.MaxMessageRetries > 0 {
		o.DLQ = &pulsar.DLQPolicy{MaxDeliveries: uint32(r.MaxMessageRetries) + 1, DeadLetterTopic: r.DeadLetterTopic}
	}
	return o
}

// producerOptions are the options of every producer the instance creates
// on topic: the function's producer spec, or batching with a 10 ms delay
// and LZ4 compression, as Pulsar's instances default.
func (i *instance) producerOptions(topic string) pulsar.ProducerOptions {
	o := pulsar.ProducerOptions{
		Topic:                   topic,
		Properties:              i.clientProperties(),
		CompressionType:         pulsar.LZ4,
		BatchingMaxPublishDelay: defaultBatchingDelay,
		SendTimeout:             -1, // wait for the broker however long: an input is settled only by the answer
	}
	spec := i.cfg.Details.Sink.ProducerSpec
	if spec == nil {
		return o
	}
	switch spec.CompressionType {
	case pb.CompressionType_NONE:
		o.CompressionType = pulsar.NoCompression
	case pb.CompressionType_ZLIB:
		o.CompressionType = pulsar.ZLib
	case pb.CompressionType_ZSTD:
		o.CompressionType = pulsar.ZSTD
	}
	if spec.MaxPendingMessages > 0 {
		o.MaxPendingMessages = int(spec.MaxPendingMessages)
	}
	batcher := spec.BatchBuilder
	if b := spec.BatchingSpec; b != nil {
		o.DisableBatching = !b.Enabled
		if b.BatchingMaxPublishDelayMs > 0 {
			o.BatchingMaxPublishDelay = time.Duration(b.BatchingMaxPublishDelayMs) * time.Millisecond
		}
		if b.BatchingMaxMessages > 0 {
			o.BatchingMaxMessages = uint(b.BatchingMaxMessages)
		}
		if b.BatchingMaxBytes > 0 {
			o.BatchingMaxSize = uint(b.BatchingMaxBytes)
		}
		if b.BatchBuilder != "" {
			batcher = b.BatchBuilder
		}
	}
	if batcher == "KEY_BASED" {
		o.BatcherBuilderType = pulsar.KeyBasedBatchBuilder
	}
	return o
}

// clientProperties identify the instance's producers and consumers in topic
// stats, with the keys Pulsar's instances use.
func (i *instance) clientProperties() map[string]string {
	return map[string]string{
		"application": "pulsar-function",
		"id":          i.cfg.FQFN(),
		"instance_id": strconv.Itoa(i.cfg.InstanceID),
	}
}

// outputProducer is FunctionContext.NewOutputMessage: the producer on
// topic, created on first use.
func (i *instance) outputProducer(topic string) pulsar.Producer {
	p, err := i.producer(topic, func() pulsar.ProducerOptions { return i.producerOptions(topic) })
	if err != nil {
		i.log.Error("output producer", "topic", topic, "err", err)
		return nil
	}
	return p
}

// effectivelyOnceProducer returns the producer that publishes the outputs of
// input (a topic partition) under EFFECTIVELY_ONCE. Its name derives from
// the function and the input partition, not from the instance, so the
// broker's deduplication state follows the partition when a failover
// subscription moves it to another instance.
func (i *instance) effectivelyOnceProducer(input string) (pulsar.Producer, error) {
	return i.producer("eo:"+input, func() pulsar.ProducerOptions {
		o := i.producerOptions(i.cfg.Details.Sink.Topic)
		o.Name = i.cfg.FQFN() + "-" + input
		o.DisableBatching = true // each message keeps its own sequence id
		return o
	})
}

func (i *instance) producer(key string, opts func() pulsar.ProducerOptions) (pulsar.Producer, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closing || i.client == nil {
		return nil, errors.New("the instance is not running")
	}
	if p := i.producers[key]; p != nil {
		return p, nil
	}
	o := opts()
	p, err := i.client.CreateProducer(o)
	if err != nil {
		return nil, fmt.Errorf("producer on %s: %w", o.Topic, err)
	}
	i.producers[key] = p
	return p, nil
}

// closePulsar flushes the producers, so that outputs in flight are
// published and their inputs acknowledged, then closes the consumers, the
// producers and the client.
func (i *instance) closePulsar() {
	logsink.Set(nil)
	i.mu.Lock()
	i.closing = true
	producers := make([]pulsar.Producer, 0, len(i.producers)+2)
	for _, p := range i.producers {
		producers = append(producers, p)
	}
	i.mu.Unlock()
	if i.sink != nil {
		producers = append(producers, i.sink)
	}
	if i.logProd != nil {
		producers = append(producers, i.logProd)
	}

	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	for _, p := range producers {
		if err := p.FlushWithCtx(ctx); err != nil {
			i.log.Warn("flush at shutdown", "topic", p.Topic(), "err", err)
		}
	}
	// Messages dispatched while the consumers close are dropped unacked;
	// the broker redelivers them.
	drained := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-i.msgs:
			case <-stop:
				return
			}
		}
	}()
	for _, c := range i.consumers {
		c.Close()
	}
	close(stop)
	<-drained
	for _, p := range producers {
		p.Close()
	}
	if i.client != nil {
		i.client.Close()
	}
}

// listen binds the InstanceControl and metrics ports on the loopback
// interface, so a taken port fails the start before anything connects.
func (i *instance) listen() error {
	var err error
	if p := i.cfg.Port; p > 0 {
		if i.grpcLis, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err != nil {
			return fmt.Errorf("InstanceControl port: %w", err)
		}
	}
	if p := i.cfg.MetricsPort; p > 0 {
		if i.metricsLis, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err != nil {
			if i.grpcLis != nil {
				i.grpcLis.Close()
			}
			return fmt.Errorf("metrics port: %w", err)
		}
	}
	return nil
}

// serve starts the servers on the bound ports.
func (i *instance) serve() {
	if i.grpcLis != nil {
		i.grpc = grpc.NewServer()
		pb.RegisterInstanceControlServer(i.grpc, &controlServer{i: i})
		i.servers.Go(func() {
			if err := i.grpc.Serve(i.grpcLis); err != nil {
				i.log.Error("InstanceControl server", "err", err)
			}
		})
	}
	if i.metricsLis != nil {
		i.metricsSrv = &http.Server{Handler: metricsHandler(i.reg), ReadHeaderTimeout: 10 * time.Second}
		i.servers.Go(func() {
			if err := i.metricsSrv.Serve(i.metricsLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				i.log.Error("metrics server", "err", err)
			}
		})
	}
}

func (i *instance) stopServers() {
	if i.grpc != nil {
		done := make(chan struct{})
		go func() {
			i.grpc.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(serverStopTimeout):
			i.grpc.Stop()
			<-done
		}
	}
	if i.metricsSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), serverStopTimeout)
		if err := i.metricsSrv.Shutdown(ctx); err != nil {
			i.metricsSrv.Close()
		}
		cancel()
	}
	i.servers.Wait()
}

// levelFilter raises the minimum level of a handler.
type levelFilter struct {
	slog.Handler
	min slog.Level
}

func (f levelFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.Handler.Enabled(ctx, l)
}

func (f levelFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return levelFilter{f.Handler.WithAttrs(as), f.min}
}

func (f levelFilter) WithGroup(name string) slog.Handler {
	return levelFilter{f.Handler.WithGroup(name), f.min}
}
