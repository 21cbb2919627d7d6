package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// magnetarSystem runs `magnetar standalone` built from this repository and
// drives it through the Apache Pulsar Go client.
type magnetarSystem struct {
	root string // module root
	bin  string
	// backlogReadRate is passed as --backlog-read-rate (bytes/s; 0: the
	// default, unpaced).
	backlogReadRate int64
	// pprofAddr is passed as --pprof-addr: profile the server while a
	// workload runs (servers run one at a time, so one address serves).
	pprofAddr string
	// copyToEntryLogs starts it with --copy-to-entry-logs (system
	// "magnetar-copied": the bookie copies every entry to the entry logs
	// at each flush, the layout that copies).
	copyToEntryLogs bool
	// extraArgs are appended to the standalone's command line
	// (-magnetar-flags), for example an operator's setting to measure.
	extraArgs []string
	// secure (systems "magnetar-secure" and "magnetar-tls") serves the
	// clients over TLS, with token authentication and authorization on
	// unless secure.tlsOnly (secure.go).
	secure *secureSetup
}

func (m *magnetarSystem) name() string {
	switch {
	case m.copyToEntryLogs:
		return "magnetar-copied"
	case m.secure != nil && m.secure.tlsOnly:
		return "magnetar-tls"
	case m.secure != nil:
		return "magnetar-secure"
	}
	return "magnetar"
}

func (m *magnetarSystem) prepare(ctx context.Context, dir string) error {
	// Each variant builds its own binary: the builds run at once.
	m.bin = filepath.Join(dir, m.name())
	if m.secure != nil {
		if err := m.secure.prepare(filepath.Join(dir, m.name()+"-tls")); err != nil {
			return err
		}
	}
	return goBuild(ctx, m.root, m.bin, "./cmd/magnetar")
}

func (m *magnetarSystem) start(ctx context.Context, dir string, d durability) (server, error) {
	addrs, err := freeport.Addrs(4)
	if err != nil {
		return nil, err
	}
	s, err := m.startAt(ctx, dir, d, addrs)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// startAt starts the standalone on addrs (broker, admin HTTP, bookie and,
// for the secure variant, the TLS broker listener): a restart on the same
// data directory must reuse the bookie's address, which its cookie records.
func (m *magnetarSystem) startAt(ctx context.Context, dir string, d durability, addrs []string) (*magnetarServer, error) {
	args := []string{"standalone", "--data-dir", filepath.Join(dir, "data"),
		"--broker-addr", addrs[0], "--http-addr", addrs[1], "--bookie-addr", addrs[2]}
	if d == durOS {
		args = append(args, "--journal-sync=false")
	}
	if m.backlogReadRate > 0 {
		args = append(args, "--backlog-read-rate", strconv.FormatInt(m.backlogReadRate, 10))
	}
	if m.pprofAddr != "" {
		args = append(args, "--pprof-addr", m.pprofAddr)
	}
	if m.copyToEntryLogs {
		args = append(args, "--copy-to-entry-logs")
	}
	if m.secure != nil {
		args = append(args, m.secure.args(addrs[3])...)
	}
	args = append(args, m.extraArgs...)
	p, err := startProcess(dir, "magnetar.log", m.bin, args...)
	if err != nil {
		return nil, err
	}
	s := &magnetarServer{process: p, broker: addrs[0], http: addrs[1], bookie: addrs[2]}
	if m.secure != nil {
		s.broker, s.secure = addrs[3], m.secure
	}
	err = p.waitReady(ctx, func(ctx context.Context) error {
		return s.httpDo(ctx, http.MethodGet, "/admin/v2/brokers/health", "")
	})
	if err == nil && m.secure.authenticated() {
		err = s.httpDo(ctx, http.MethodPost, "/admin/v2/namespaces/public/default/permissions/"+secureClientRole, `["produce","consume"]`)
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	return s, nil
}

type magnetarServer struct {
	*process
	broker, http string
	bookie       string       // standalone only
	secure       *secureSetup // nil: plain text, no authentication
}

// clientOptions are the Pulsar client's options for this server: plain
// text, or TLS trusting the bench CA, with the client role's token when the
// server authenticates.
func (s *magnetarServer) clientOptions() pulsar.ClientOptions {
	o := pulsar.ClientOptions{
		URL:              "pulsar://" + s.broker,
		OperationTimeout: 30 * time.Second,
		Logger:           plog.DefaultNopLogger(),
	}
	if s.secure != nil {
		o.URL = "pulsar+ssl://" + s.broker
		o.TLSTrustCertsFilePath = s.secure.caFile
		if s.secure.authenticated() {
			o.Authentication = pulsar.NewAuthenticationToken(s.secure.clientToken)
		}
	}
	return o
}

func (s *magnetarServer) newAdapter() adapter { return &pulsarAdapter{srv: s} }

func (s *magnetarServer) httpDo(ctx context.Context, method, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.http+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.secure.authenticated() {
		req.Header.Set("Authorization", "Bearer "+s.secure.adminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("streambench: %s %s: %s", method, path, resp.Status)
	}
	return nil
}

// batchMessages is the producer's largest batch, in messages: a W2 batch
// of 1 KiB messages fills at it.
const batchMessages = 1000

// pulsarAdapter drives Magnetar through pulsar-client-go: a partitioned
// topic, one producer with batching, one exclusive consumer per
// subscription.
type pulsarAdapter struct {
	srv       *magnetarServer
	client    pulsar.Client
	producer  pulsar.Producer
	consumers []pulsar.Consumer
	topic     string
	onAck     func([]byte, error)
	stop      chan struct{}
	wg        sync.WaitGroup // the consumers' delivery goroutines
}

func (a *pulsarAdapter) setup(ctx context.Context, spec topicSpec, onAck func([]byte, error)) error {
	kind := "persistent"
	if spec.durability == durMemory {
		kind = "non-persistent"
	}
	a.topic = kind + "://public/default/" + spec.name
	a.onAck = onAck
	a.stop = make(chan struct{})
	err := a.srv.httpDo(ctx, http.MethodPut, "/admin/v2/"+kind+"/public/default/"+spec.name+"/partitions", strconv.Itoa(spec.partitions))
	if err != nil {
		return err
	}
	a.client, err = pulsar.NewClient(a.srv.clientOptions())
	if err != nil {
		return fmt.Errorf("streambench: pulsar client: %w", err)
	}
	po := pulsar.ProducerOptions{
		Topic:                   a.topic,
		MaxPendingMessages:      32768,
		BatchingMaxPublishDelay: time.Millisecond, // latency runs: what pulsar-perf does by default
		BatchingMaxMessages:     batchMessages,
		SendTimeout:             time.Minute,
	}
	if spec.throughput {
		po.BatchingMaxPublishDelay = 10 * time.Millisecond
		po.BatchingMaxSize = 1 << 20
	}
	a.producer, err = a.client.CreateProducer(po)
	if err != nil {
		return fmt.Errorf("streambench: pulsar producer: %w", err)
	}
	return nil
}

func (a *pulsarAdapter) subscribe(ctx context.Context, sub subscription, onMsg func([]byte)) error {
	name, pos := "bench", pulsar.SubscriptionPositionLatest
	if sub.name != "" {
		name = sub.name
	}
	if sub.fromStart {
		pos = pulsar.SubscriptionPositionEarliest
	}
	ch := make(chan pulsar.ConsumerMessage, 4096)
	c, err := a.client.Subscribe(pulsar.ConsumerOptions{
		Topic:                       a.topic,
		SubscriptionName:            name,
		Type:                        pulsar.Exclusive,
		SubscriptionInitialPosition: pos,
		MessageChannel:              ch,
		ReceiverQueueSize:           2000,
	})
	if err != nil {
		return fmt.Errorf("streambench: pulsar subscribe: %w", err)
	}
	a.consumers = append(a.consumers, c)
	a.wg.Add(1)
	go func() { // owned by a: stopped by teardown
		defer a.wg.Done()
		for {
			select {
			case <-a.stop:
				return
			case m := <-ch:
				onMsg(m.Payload())
				m.Consumer.Ack(m.Message)
			}
		}
	}()
	return nil
}

func (a *pulsarAdapter) publish(ctx context.Context, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a.producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload},
		func(_ pulsar.MessageID, m *pulsar.ProducerMessage, err error) { a.onAck(m.Payload, err) })
	return nil
}

func (a *pulsarAdapter) teardown(ctx context.Context) error {
	if a.stop != nil {
		close(a.stop)
	}
	a.wg.Wait()
	if a.producer != nil {
		a.producer.Close()
	}
	for _, c := range a.consumers {
		c.Close()
	}
	if a.client != nil {
		a.client.Close()
	}
	return nil
}
