package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/issuer"
	"github.com/magnetar-dev/magnetar/internal/accesstoken"
	"github.com/magnetar-dev/magnetar/regions/pulsaradmin"
)

// EnvPulsarToken holds the data-plane token when --token is not given.
const EnvPulsarToken = "MAGNETAR_PULSAR_TOKEN"

// dataPlaneHelp is appended to the help of the commands that talk to a
// cluster's data plane.
const dataPlaneHelp = `

This command talks to the topic's cluster, not to the control plane: it
reads the cluster's service URL and admin URL from the control plane
(magnetar cluster get), unless --service-url and --admin-url give them;
then ORG and CLUSTER only complete the topic's path and no API key is
needed. --non-persistent names a non-persistent topic.

A cluster that serves TLS (every cluster a region agent provisions, unless
it runs with --insecure-data-planes: it has a TLS service URL, TLS admin
URL and CA certificate) is reached on its pulsar+ssl:// and https:// URLs,
trusting its CA certificate only, with access tokens for the cluster's
audience (urn:magnetar:cluster:ORG/CLUSTER) that the control plane's token
endpoint (/oauth2/token at --endpoint) issues for the API key, renewed
while the command runs; the broker then allows what the key's role
bindings give (roles/pulsar.producer, roles/pulsar.consumer), which also
let the key read the cluster's URLs. --token (env ` + EnvPulsarToken + `)
sends that Pulsar token instead, on any cluster.`

// dpFlags are the data-plane flags.
type dpFlags struct {
	serviceURL    string
	adminURL      string
	token         string
	nonPersistent bool
}

// register adds the flags; service says whether the command uses the
// service URL, topic whether it takes a topic (--non-persistent).
func (d *dpFlags) register(f *pflag.FlagSet, service, topic bool) {
	if service {
		f.StringVar(&d.serviceURL, "service-url", "", "the cluster's Pulsar service URL, e.g. pulsar+ssl://127.0.0.1:6651 or pulsar://127.0.0.1:6650 (default: from the control plane)")
	}
	f.StringVar(&d.adminURL, "admin-url", "", "the cluster's Pulsar admin URL, e.g. https://127.0.0.1:8443 or http://127.0.0.1:8080 (default: from the control plane)")
	f.StringVar(&d.token, "token", "", "Pulsar token for the data plane (env "+EnvPulsarToken+")")
	if topic {
		f.BoolVar(&d.nonPersistent, "non-persistent", false, "the topic is non-persistent")
	}
}

// dataPlane is where a cluster serves Pulsar and how to authenticate
// there.
type dataPlane struct {
	serviceURL string
	adminURL   string
	// token is the fixed token of --token or EnvPulsarToken; tokens, when
	// set instead, renews the access token exchanged for the API key.
	token  string
	tokens func(context.Context) (string, error)
	// roots trusts the cluster's CA on its TLS URLs (nil: system roots).
	roots *x509.CertPool
	// fromControlPlane is set when the URLs are the Cluster resource's: the
	// cluster is one the control plane manages.
	fromControlPlane bool
}

// dataPlane finds the URLs of cluster (its full name) that the command
// needs: from the flags, else from the control plane's Cluster resource.
// A cluster that serves TLS (tlsServiceUrl, tlsAdminUrl and its
// caCertificate) is reached there, trusting its CA, and without a token
// given the API key is exchanged at the control plane's token endpoint
// for access tokens of the cluster's audience.
func (s *session) dataPlane(ctx context.Context, cluster string, d *dpFlags, service, admin bool) (dataPlane, error) {
	dp := dataPlane{serviceURL: d.serviceURL, adminURL: d.adminURL, token: d.token}
	if dp.token == "" {
		dp.token = os.Getenv(EnvPulsarToken)
	}
	if (!service || dp.serviceURL != "") && (!admin || dp.adminURL != "") {
		return dp, nil
	}
	if err := s.needKey(); err != nil {
		return dp, fmt.Errorf("%w (or give --service-url and --admin-url)", err)
	}
	c, err := s.clusters().GetCluster(ctx, &cpv1.GetClusterRequest{Name: cluster})
	if status.Code(err) == codes.PermissionDenied {
		return dp, fmt.Errorf("%w (reading the cluster's URLs takes a role binding on it or on a namespace of it, e.g. roles/pulsar.producer or roles/viewer; or give --service-url and --admin-url)", plainError(err))
	}
	if err != nil {
		return dp, err
	}
	dp.fromControlPlane = true
	tlsURLs := c.GetTlsServiceUrl() != "" && c.GetTlsAdminUrl() != "" && c.GetCaCertificate() != ""
	serviceURL, adminURL := c.GetServiceUrl(), c.GetAdminUrl()
	if tlsURLs {
		serviceURL, adminURL = c.GetTlsServiceUrl(), c.GetTlsAdminUrl()
		dp.roots = x509.NewCertPool()
		if !dp.roots.AppendCertsFromPEM([]byte(c.GetCaCertificate())) {
			return dp, fmt.Errorf("cluster %s: its caCertificate holds no PEM certificate", shortName(cluster))
		}
	}
	if dp.serviceURL == "" {
		dp.serviceURL = serviceURL
	}
	if dp.adminURL == "" {
		dp.adminURL = adminURL
	}
	if (service && dp.serviceURL == "") || (admin && dp.adminURL == "") {
		return dp, fmt.Errorf("cluster %s has no URLs yet (state %v): wait until it is READY", shortName(cluster), c.GetState())
	}
	if tlsURLs && dp.token == "" {
		src := accesstoken.New(s.g.controlPlaneURL(), s.key, accesstoken.WithTokenEndpoint(s.g.controlPlaneURL()+issuer.TokenPath))
		aud := issuer.ClusterAudience(cluster)
		dp.tokens = func(ctx context.Context) (string, error) { return src.Token(ctx, aud) }
		// The first token now: a refusal ends the command before it
		// connects.
		if _, err := dp.tokens(ctx); err != nil {
			return dp, err
		}
	}
	return dp, nil
}

// admin returns a client of the data plane's admin API.
func (dp dataPlane) admin() (*pulsaradmin.Client, error) {
	var opts []pulsaradmin.Option
	if dp.roots != nil {
		opts = append(opts, pulsaradmin.WithRootCAs(dp.roots))
	}
	switch {
	case dp.tokens != nil:
		opts = append(opts, pulsaradmin.WithTokenSource(dp.tokens))
	case dp.token != "":
		opts = append(opts, pulsaradmin.WithToken(dp.token))
	}
	return pulsaradmin.New(dp.adminURL, opts...)
}

// client returns a Pulsar client of the data plane. It logs warnings and
// errors to errOut, everything when the default logger is at debug level;
// ctx bounds the token requests of its renewals.
func (dp dataPlane) client(ctx context.Context, errOut io.Writer) (pulsar.Client, error) {
	logger := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if slog.Default().Enabled(context.Background(), slog.LevelDebug) {
		logger = slog.Default()
	}
	opts := pulsar.ClientOptions{URL: dp.serviceURL, OperationTimeout: 30 * time.Second, Logger: plog.NewLoggerWithSlog(logger)}
	if dp.roots != nil {
		opts.TLSConfig = &tls.Config{RootCAs: dp.roots, MinVersion: tls.VersionTLS12}
	}
	switch {
	case dp.tokens != nil:
		opts.Authentication = pulsar.NewAuthenticationTokenFromSupplier(func() (string, error) { return dp.tokens(ctx) })
	case dp.token != "":
		opts.Authentication = pulsar.NewAuthenticationToken(dp.token)
	}
	return pulsar.NewClient(opts)
}

// topicError returns err, a Pulsar client's failure on topic tn (whose
// resource name is name), or, when the cause is that the topic's namespace
// or tenant does not exist, an error saying so: the Pulsar client only reports
// TopicNotFound then. The cluster's admin API answers 404 for the
// partitions of a topic whose namespace is missing; where it may not be
// asked (no admin URL, or the key may not read it) and the cluster is the
// control plane's, the Namespace resource is.
func (s *session) topicError(ctx context.Context, dp dataPlane, name string, tn pulsaradmin.TopicName, err error) error {
	if ctx.Err() != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ns, _, _ := strings.Cut(name, "/topics/")
	cluster := shortName(strings.Join(strings.Split(name, "/")[:4], "/"))
	noNamespace := fmt.Errorf("namespace %s/%s does not exist on cluster %s (create it: magnetar namespace create %s)",
		tn.Tenant, tn.Namespace, cluster, shortName(ns))
	if dp.adminURL != "" {
		if adm, aerr := dp.admin(); aerr == nil {
			_, perr := adm.Partitions(ctx, tn)
			var ae *pulsaradmin.Error
			switch {
			case perr == nil:
				return err // the namespace exists
			case errors.As(perr, &ae) && ae.Status == http.StatusNotFound && strings.Contains(strings.ToLower(ae.Reason), "tenant"):
				return fmt.Errorf("tenant %s does not exist on cluster %s (create it: magnetar tenant create %s/%s)", tn.Tenant, cluster, cluster, tn.Tenant)
			case errors.As(perr, &ae) && ae.Status == http.StatusNotFound:
				return noNamespace
			}
		}
	}
	if dp.fromControlPlane {
		if _, gerr := s.namespaces().GetNamespace(ctx, &cpv1.GetNamespaceRequest{Name: ns}); status.Code(gerr) == codes.NotFound {
			return noNamespace
		}
	}
	return err
}

// topicTarget resolves a topic argument to its resource name, its
// cluster's name and its Pulsar name.
func topicTarget(args []string, d *dpFlags) (name, cluster string, tn pulsaradmin.TopicName, err error) {
	name, err = kindTopic.resolve(args)
	if err != nil {
		return "", "", tn, err
	}
	tn, err = pulsaradmin.TopicOf(&cpv1.Topic{Name: name, Persistent: proto.Bool(!d.nonPersistent)})
	parts := strings.Split(name, "/")
	return name, strings.Join(parts[:4], "/"), tn, err
}

// message is a message as the data-plane commands print it.
type message struct {
	ID           string            `json:"messageId"`
	PublishTime  time.Time         `json:"publishTime"`
	EventTime    *time.Time        `json:"eventTime,omitempty"`
	ProducerName string            `json:"producerName,omitempty"`
	Key          string            `json:"key,omitempty"`
	Properties   map[string]string `json:"properties,omitempty"`
	// Payload is the payload when it is UTF-8 text, PayloadBase64 otherwise.
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payloadBase64,omitempty"`
}

func newMessage(id string, publish, event time.Time, producer, key string, props map[string]string, payload []byte) message {
	m := message{ID: id, PublishTime: publish.UTC(), ProducerName: producer, Key: key, Properties: props}
	if !event.IsZero() && event.UnixMilli() != 0 { // the Go client's unset event time is the epoch
		e := event.UTC()
		m.EventTime = &e
	}
	if utf8.Valid(payload) {
		p := string(payload)
		m.Payload = &p
	} else {
		m.PayloadBase64 = payload
	}
	return m
}

// cells are the message's text columns: id, publish time, key,
// properties, payload (quoted unless printable text).
func (m message) cells() []string {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m.Properties {
			if !yield(k) {
				return
			}
		}
	})
	props := make([]string, len(keys))
	for i, k := range keys {
		props[i] = k + "=" + m.Properties[k]
	}
	payload := ""
	switch {
	case m.Payload != nil && strings.IndexFunc(*m.Payload, func(r rune) bool { return !unicode.IsPrint(r) }) < 0:
		payload = *m.Payload
	case m.Payload != nil:
		payload = strconv.Quote(*m.Payload)
	default:
		payload = strconv.Quote(string(m.PayloadBase64))
	}
	return []string{m.ID, m.PublishTime.Format(time.RFC3339Nano), m.Key, strings.Join(props, ","), payload}
}

var messageHeader = []string{"MESSAGE ID", "PUBLISHED", "KEY", "PROPERTIES", "PAYLOAD"}

// printValue writes v as indented JSON.
func (s *session) printValue(v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.out, "%s\n", raw)
	return err
}

// clientID formats a Go client's message id as the admin API does:
// ledger:entry:partition, and :index for a message of a batch. partition
// is -1 for a non-partitioned topic (the Go client says 0, and 0 too when
// it was given a partition by name).
func clientID(id pulsar.MessageID, partition int32) string {
	s := fmt.Sprintf("%d:%d:%d", id.LedgerID(), id.EntryID(), partition)
	if id.BatchSize() > 0 {
		s += ":" + strconv.Itoa(int(id.BatchIdx()))
	}
	return s
}

func newProduceCommand(g *globals) *cobra.Command {
	var d dpFlags
	var msgs, files []string
	var key string
	var props map[string]string
	var count int
	cmd := &cobra.Command{
		Use:   "produce ORG/CLUSTER/TENANT/NS/TOPIC [-m MESSAGE]... [-f FILE]... [-k KEY] [-p K=V]...",
		Short: "Publish messages to a topic",
		Long: `Publish messages to a topic with the Pulsar Go client: each -m is one
message, each -f one message holding the file's bytes; without either, each
line read from stdin is one. -n sends each of them that many times. The
command returns once every message is acknowledged by the broker and prints
how many were sent (-o json: their message ids).` + dataPlaneHelp,
		Args: nameArgs(kindTopic),
		RunE: g.runKeyOptional(func(ctx context.Context, s *session, args []string) error {
			name, cluster, tn, err := topicTarget(args, &d)
			if err != nil {
				return err
			}
			if count < 1 {
				return usageError(s.cmd, "-n must be at least 1")
			}
			var payloads [][]byte
			for _, m := range msgs {
				payloads = append(payloads, []byte(m))
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					return err
				}
				payloads = append(payloads, b)
			}
			if len(msgs) == 0 && len(files) == 0 {
				sc := bufio.NewScanner(s.cmd.InOrStdin())
				sc.Buffer(make([]byte, 64<<10), 5<<20)
				for sc.Scan() {
					payloads = append(payloads, slices.Clone(sc.Bytes()))
				}
				if err := sc.Err(); err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
			}
			dp, err := s.dataPlane(ctx, cluster, &d, true, false)
			if err != nil {
				return err
			}
			ids, err := produce(ctx, dp, s.errOut, tn.String(), payloads, count, key, props)
			if err != nil {
				return s.topicError(ctx, dp, name, tn, err)
			}
			if s.g.output == "json" {
				return s.printValue(map[string]any{"topic": tn.String(), "messageIds": ids})
			}
			noun := "messages"
			if len(ids) == 1 {
				noun = "message"
			}
			_, err = fmt.Fprintf(s.out, "produced %d %s to %s\n", len(ids), noun, tn)
			return err
		}),
	}
	f := cmd.Flags()
	d.register(f, true, true)
	f.StringArrayVarP(&msgs, "message", "m", nil, "a message's payload (repeatable)")
	f.StringArrayVarP(&files, "file", "f", nil, "a file whose bytes are one message's payload (repeatable)")
	f.StringVarP(&key, "key", "k", "", "message key (routes the message to a partition)")
	f.StringToStringVarP(&props, "property", "p", nil, "message property KEY=VALUE (repeatable)")
	f.IntVarP(&count, "num-produce", "n", 1, "send each message this many times")
	return cmd
}

// produce sends every payload count times and returns the message ids in
// the order sent.
func produce(ctx context.Context, dp dataPlane, errOut io.Writer, topic string, payloads [][]byte, count int, key string, props map[string]string) ([]string, error) {
	client, err := dp.client(ctx, errOut)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	parts, err := client.TopicPartitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	partitioned := len(parts) > 1 || (len(parts) == 1 && parts[0] != topic)
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return nil, fmt.Errorf("create producer on %s: %w", topic, err)
	}
	defer p.Close()
	ids := make([]string, len(payloads)*count)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for r := 0; r < count; r++ {
		for i, pl := range payloads {
			slot := r*len(payloads) + i
			wg.Add(1)
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: pl, Key: key, Properties: props},
				func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					defer wg.Done()
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						if firstErr == nil {
							firstErr = err
						}
						return
					}
					part := partitionOf(topic)
					if partitioned {
						part = id.PartitionIdx()
					}
					ids[slot] = clientID(id, part)
				})
		}
	}
	if err := p.FlushWithCtx(ctx); err != nil && firstErr == nil {
		firstErr = err
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("produce to %s: %w", topic, firstErr)
	}
	return ids, nil
}

func newConsumeCommand(g *globals) *cobra.Command {
	var d dpFlags
	var sub, subType, initial string
	var count int
	var noAck bool
	cmd := &cobra.Command{
		Use:   "consume ORG/CLUSTER/TENANT/NS/TOPIC -s SUBSCRIPTION [-n N]",
		Short: "Receive messages from a topic",
		Long: `Receive messages from a topic through a subscription with the Pulsar Go
client, print each as it arrives (id, publish time, key, properties,
payload; -o json: one JSON object per line) and acknowledge it (unless
--no-ack; a message of a batch is acknowledged alone). It returns after -n
messages; -n 0 receives until Ctrl-C or
--timeout. A subscription that does not exist yet is created at the
earliest message (--initial-position latest: after the last one).` + dataPlaneHelp,
		Args: nameArgs(kindTopic),
		RunE: g.runKeyOptional(func(ctx context.Context, s *session, args []string) error {
			name, cluster, tn, err := topicTarget(args, &d)
			if err != nil {
				return err
			}
			if sub == "" {
				return usageError(s.cmd, "--subscription is required")
			}
			if count < 0 {
				return usageError(s.cmd, "-n must not be negative")
			}
			types := map[string]pulsar.SubscriptionType{"exclusive": pulsar.Exclusive, "shared": pulsar.Shared,
				"failover": pulsar.Failover, "key_shared": pulsar.KeyShared, "key-shared": pulsar.KeyShared}
			st, ok := types[strings.ToLower(subType)]
			if !ok {
				return usageError(s.cmd, fmt.Sprintf("--subscription-type %q: want exclusive, shared, failover or key_shared", subType))
			}
			pos := pulsar.SubscriptionPositionEarliest
			switch strings.ToLower(initial) {
			case "earliest":
			case "latest":
				pos = pulsar.SubscriptionPositionLatest
			default:
				return usageError(s.cmd, fmt.Sprintf("--initial-position %q: want earliest or latest", initial))
			}
			dp, err := s.dataPlane(ctx, cluster, &d, true, false)
			if err != nil {
				return err
			}
			client, err := dp.client(ctx, s.errOut)
			if err != nil {
				return err
			}
			defer client.Close()
			// Batch index acknowledgement: -n 1 on a batch acknowledges that
			// one message at the broker, not none of them.
			c, err := client.Subscribe(pulsar.ConsumerOptions{Topic: tn.String(), SubscriptionName: sub, Type: st,
				SubscriptionInitialPosition: pos, EnableBatchIndexAcknowledgment: true})
			if err != nil {
				return s.topicError(ctx, dp, name, tn, fmt.Errorf("subscribe to %s: %w", tn, err))
			}
			defer c.Close()
			for got := 0; count == 0 || got < count; got++ {
				msg, err := c.Receive(ctx)
				if err != nil {
					if count == 0 && ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("received %d of %d messages: %w", got, count, err)
				}
				m := newMessage(clientID(msg.ID(), partitionOf(msg.Topic())), msg.PublishTime(), msg.EventTime(), msg.ProducerName(), msg.Key(), msg.Properties(), msg.Payload())
				if s.g.output == "json" {
					raw, err := json.Marshal(m)
					if err != nil {
						return err
					}
					fmt.Fprintf(s.out, "%s\n", raw)
				} else {
					cells := m.cells()
					for i, c := range cells {
						if c == "" {
							cells[i] = "-"
						}
					}
					fmt.Fprintln(s.out, strings.Join(cells, "  "))
				}
				if !noAck {
					if err := c.Ack(msg); err != nil {
						return fmt.Errorf("acknowledge %s: %w", m.ID, err)
					}
				}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	d.register(f, true, true)
	f.StringVarP(&sub, "subscription", "s", "", "subscription name (required)")
	f.StringVar(&subType, "subscription-type", "exclusive", "exclusive, shared, failover or key_shared")
	f.StringVar(&initial, "initial-position", "earliest", "where a new subscription starts: earliest or latest")
	f.IntVarP(&count, "num-messages", "n", 1, "return after this many messages (0: until Ctrl-C or --timeout)")
	f.BoolVar(&noAck, "no-ack", false, "do not acknowledge the messages")
	return cmd
}

// partitionsOf returns the topics to read for tn: its partitions when it
// is partitioned, else tn itself.
func partitionsOf(ctx context.Context, a *pulsaradmin.Client, tn pulsaradmin.TopicName) ([]pulsaradmin.TopicName, error) {
	n, err := a.Partitions(ctx, tn)
	if err != nil || n == 0 {
		return []pulsaradmin.TopicName{tn}, err
	}
	out := make([]pulsaradmin.TopicName, n)
	for i := range out {
		out[i] = tn
		out[i].Topic = tn.Topic + "-partition-" + strconv.Itoa(i)
	}
	return out, nil
}

func newPeekCommand(g *globals) *cobra.Command {
	var d dpFlags
	var sub, from string
	var count int
	cmd := &cobra.Command{
		Use:   "peek ORG/CLUSTER/TENANT/NS/TOPIC [-s SUBSCRIPTION] [-n N]",
		Short: "Show messages of a topic without consuming them",
		Long: `Show up to -n messages of a topic without acknowledging or moving anything,
through the cluster's admin API: with -s, the subscription's next
unacknowledged messages (.../subscription/{sub}/position/{i}); without, the
topic's first messages (--from earliest) or its last ones, newest first
(--from latest) (.../examinemessage). A partitioned topic is read partition
by partition, up to -n messages from each. A batch counts as one position
and is shown as all its messages, those already acknowledged included.` + dataPlaneHelp,
		Args: nameArgs(kindTopic),
		RunE: g.runKeyOptional(func(ctx context.Context, s *session, args []string) error {
			_, cluster, tn, err := topicTarget(args, &d)
			if err != nil {
				return err
			}
			if count < 1 {
				return usageError(s.cmd, "-n must be at least 1")
			}
			if from != "earliest" && from != "latest" {
				return usageError(s.cmd, fmt.Sprintf("--from %q: want earliest or latest", from))
			}
			dp, err := s.dataPlane(ctx, cluster, &d, false, true)
			if err != nil {
				return err
			}
			a, err := dp.admin()
			if err != nil {
				return err
			}
			parts, err := partitionsOf(ctx, a, tn)
			if err != nil {
				return err
			}
			var out []message
			for _, p := range parts {
				var ms []pulsaradmin.Message
				if sub != "" {
					ms, err = a.PeekMessages(ctx, p, sub, count)
				} else {
					ms, err = a.ExamineMessages(ctx, p, from == "earliest", count)
				}
				if err != nil {
					return err
				}
				for _, m := range ms {
					split, err := m.Split()
					if err != nil {
						fmt.Fprintf(s.errOut, "magnetar: %v: shown as one raw payload\n", err)
					}
					for _, x := range split {
						out = append(out, newMessage(x.ID, x.PublishTime, x.EventTime, x.ProducerName, x.Key, x.Properties, x.Payload))
					}
				}
			}
			if s.g.output == "json" {
				return s.printValue(map[string]any{"topic": tn.String(), "messages": out})
			}
			t := &table{header: messageHeader}
			for _, m := range out {
				t.add(m.cells()...)
			}
			return t.write(s.out)
		}),
	}
	f := cmd.Flags()
	d.register(f, false, true)
	f.StringVarP(&sub, "subscription", "s", "", "peek this subscription's backlog (default: the topic's messages)")
	f.StringVar(&from, "from", "earliest", "without -s: earliest (first messages) or latest (last messages)")
	f.IntVarP(&count, "num-messages", "n", 1, "messages to show (per partition)")
	return cmd
}

func newStatsCommand(g *globals) *cobra.Command {
	var d dpFlags
	cmd := &cobra.Command{
		Use:   "stats ORG/CLUSTER/TENANT/NS/TOPIC",
		Short: "Show a topic's stats on its cluster",
		Long: `Show a topic's stats from the cluster's admin API (.../stats, or
.../partitioned-stats summed over the partitions of a partitioned topic):
message and byte counters since the topic was loaded, rates, storage and
backlog, producers, and each subscription's backlog and consumers. -o json
prints the admin API's answer as it is (Pulsar's TopicStats).` + dataPlaneHelp,
		Args: nameArgs(kindTopic),
		RunE: g.runKeyOptional(func(ctx context.Context, s *session, args []string) error {
			_, cluster, tn, err := topicTarget(args, &d)
			if err != nil {
				return err
			}
			dp, err := s.dataPlane(ctx, cluster, &d, false, true)
			if err != nil {
				return err
			}
			a, err := dp.admin()
			if err != nil {
				return err
			}
			st, err := a.Stats(ctx, tn)
			if err != nil {
				return err
			}
			if s.g.output == "json" {
				var v any
				if err := json.Unmarshal(st.Raw, &v); err != nil {
					return err
				}
				return s.printValue(v)
			}
			return statsTables(s.out, tn.String(), st)
		}),
	}
	d.register(cmd.Flags(), false, true)
	return cmd
}

// statsTables writes a topic's figures, then its subscriptions.
func statsTables(w io.Writer, topic string, st *pulsaradmin.TopicStats) error {
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	rate := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	t := &table{header: []string{"TOPIC", "PARTITIONS", "MSG IN", "BYTES IN", "MSG OUT", "BYTES OUT", "RATE IN/S", "RATE OUT/S", "STORAGE BYTES", "BACKLOG BYTES", "PRODUCERS"}}
	t.add(topic, strconv.Itoa(st.Metadata.Partitions), i64(st.MsgInCounter), i64(st.BytesInCounter), i64(st.MsgOutCounter), i64(st.BytesOutCounter),
		rate(st.MsgRateIn), rate(st.MsgRateOut), i64(st.StorageSize), i64(st.BacklogSize), strconv.Itoa(len(st.Publishers)))
	if err := t.write(w); err != nil {
		return err
	}
	if len(st.Subscriptions) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	subs := &table{header: []string{"SUBSCRIPTION", "TYPE", "BACKLOG", "UNACKED", "MSG OUT", "RATE OUT/S", "CONSUMERS"}}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range st.Subscriptions {
			if !yield(k) {
				return
			}
		}
	}) {
		ss := st.Subscriptions[name]
		subs.add(name, ss.Type, i64(ss.MsgBacklog), i64(ss.UnackedMessages), i64(ss.MsgOutCounter), rate(ss.MsgRateOut), strconv.Itoa(len(ss.Consumers)))
	}
	return subs.write(w)
}

// listedTopic is one row of topic list: a topic on the data plane, a
// control-plane Topic resource, or both.
type listedTopic struct {
	// Name is the topic's resource name (the path the CLI takes).
	Name        string `json:"name"`
	PulsarTopic string `json:"pulsarTopic"`
	Partitions  int32  `json:"partitions"`
	Persistent  bool   `json:"persistent"`
	// Managed: a control-plane Topic resource exists (Resource).
	Managed bool `json:"managed"`
	// OnDataPlane: the data plane's admin API lists the topic; unknown
	// (false) when it could not be reached.
	OnDataPlane bool            `json:"onDataPlane"`
	Resource    json.RawMessage `json:"resource,omitempty"`
	state       string
	message     string
}

// dataPlaneTopics lists a namespace's topics on the data plane, persistent
// and non-persistent, with partitions folded into their partitioned topic.
func dataPlaneTopics(ctx context.Context, a *pulsaradmin.Client, tenant, ns string) (map[string]pulsaradmin.TopicName, map[string]int32, error) {
	found := map[string]pulsaradmin.TopicName{}
	parts := map[string]int32{}
	for _, persistent := range []bool{true, false} {
		partitioned, err := a.PartitionedTopics(ctx, tenant, ns, persistent)
		if err != nil {
			return nil, nil, err
		}
		all, err := a.Topics(ctx, tenant, ns, persistent)
		if err != nil {
			return nil, nil, err
		}
		for _, full := range partitioned {
			tn := pulsaradmin.TopicName{Persistent: persistent, Tenant: tenant, Namespace: ns, Topic: full[strings.LastIndex(full, "/")+1:]}
			found[tn.String()] = tn
			n, err := a.Partitions(ctx, tn)
			if err != nil {
				return nil, nil, err
			}
			parts[tn.String()] = int32(n)
		}
		for _, full := range all {
			local := full[strings.LastIndex(full, "/")+1:]
			if i := strings.LastIndex(local, "-partition-"); i > 0 {
				if _, ok := parts[full[:len(full)-len(local)+i]]; ok {
					continue
				}
			}
			tn := pulsaradmin.TopicName{Persistent: persistent, Tenant: tenant, Namespace: ns, Topic: local}
			found[tn.String()] = tn
		}
	}
	return found, parts, nil
}

func newTopicListCommand(g *globals) *cobra.Command {
	var d dpFlags
	var managedOnly bool
	cmd := &cobra.Command{
		Use:   "list ORG/CLUSTER/TENANT/NS [--managed]",
		Short: "List a namespace's topics: the control plane's and those clients created",
		Long: `List a namespace's topics. The list merges two sources: the control
plane's Topic resources (MANAGED yes: created with magnetar topic create or
the API, with their STATE) and the topics the cluster's admin API lists for
the namespace, persistent and non-persistent, partitioned topics once with
their partitions (MANAGED no: created by clients using them, or by Pulsar's
own admin tools). A managed topic the data plane does not list yet shows
STATE PENDING, or FAILED with the reason.

When the cluster has no admin URL yet, or its admin API cannot be reached,
the command warns on stderr and lists the managed topics only. --managed
lists only the control plane's resources; with -o json it prints the API's
ListTopicsResponse, otherwise a JSON object {"topics": [...]} with, for each
topic, its path, Pulsar name, partitions, persistence, whether it is
managed and on the data plane, and the resource when managed.

--admin-url replaces the cluster's admin URL and --token authenticates to
it, as on the other data-plane commands; a cluster that serves TLS is
reached on its https:// admin URL with access tokens for the API key, as
they are (magnetar topic produce --help).`,
		Args: nameArgs(kindNamespace),
		RunE: g.runKeyOptional(func(ctx context.Context, s *session, args []string) error {
			parent, err := kindNamespace.resolve(args)
			if err != nil {
				return err
			}
			var resources []*cpv1.Topic
			if err := s.needKey(); err == nil {
				resources, err = listAll(ctx, func(ctx context.Context, tok string) ([]*cpv1.Topic, string, error) {
					r, err := s.topics().ListTopics(ctx, &cpv1.ListTopicsRequest{Parent: parent, PageToken: tok})
					return r.GetTopics(), r.GetNextPageToken(), err
				})
				if err != nil {
					return err
				}
			} else if managedOnly || d.adminURL == "" {
				return err
			}
			if managedOnly {
				return s.print(&cpv1.ListTopicsResponse{Topics: resources}, topicTable(resources...))
			}
			rows := map[string]*listedTopic{}
			for _, r := range resources {
				tn, err := pulsaradmin.TopicOf(r)
				if err != nil {
					return err
				}
				raw, err := protoJSON(r)
				if err != nil {
					return err
				}
				rows[tn.String()] = &listedTopic{Name: r.GetName(), PulsarTopic: tn.String(), Partitions: r.GetPartitions(),
					Persistent: tn.Persistent, Managed: true, Resource: raw,
					state: enumName(r.GetState(), int32(r.GetState())), message: r.GetStatusMessage()}
			}
			segs := strings.Split(parent, "/")
			cluster, tenant, ns := strings.Join(segs[:4], "/"), segs[5], segs[7]
			found, parts, err := func() (map[string]pulsaradmin.TopicName, map[string]int32, error) {
				dp, err := s.dataPlane(ctx, cluster, &d, false, true)
				if err != nil {
					return nil, nil, err
				}
				a, err := dp.admin()
				if err != nil {
					return nil, nil, err
				}
				return dataPlaneTopics(ctx, a, tenant, ns)
			}()
			if err != nil {
				fmt.Fprintf(s.errOut, "magnetar: the data plane's topics are not listed: %v\n", plainError(err))
			}
			for full, tn := range found {
				row := rows[full]
				if row == nil {
					row = &listedTopic{Name: parent + "/topics/" + tn.Topic, PulsarTopic: full, Partitions: parts[full], Persistent: tn.Persistent}
					rows[full] = row
				}
				row.OnDataPlane = true
			}
			list := make([]*listedTopic, 0, len(rows))
			for _, r := range rows {
				list = append(list, r)
			}
			slices.SortFunc(list, func(a, b *listedTopic) int { return strings.Compare(a.PulsarTopic, b.PulsarTopic) })
			if s.g.output == "json" {
				return s.printValue(map[string]any{"topics": list})
			}
			t := &table{header: []string{"NAME", "PARTITIONS", "PERSISTENT", "MANAGED", "STATE", "MESSAGE"}}
			for _, r := range list {
				managed := "no"
				if r.Managed {
					managed = "yes"
				}
				t.add(shortName(r.Name), num(r.Partitions), strconv.FormatBool(r.Persistent), managed, r.state, r.message)
			}
			return t.write(s.out)
		}),
	}
	d.register(cmd.Flags(), false, false)
	cmd.Flags().BoolVar(&managedOnly, "managed", false, "list only the control plane's Topic resources")
	return cmd
}

// partitionOf is the partition index in a topic's name ("...-partition-N"),
// -1 when the name is not a partition's.
func partitionOf(topic string) int32 {
	i := strings.LastIndex(topic, "-partition-")
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(topic[i+len("-partition-"):], 10, 32)
	if err != nil {
		return -1
	}
	return int32(n)
}

// protoJSON is m's protobuf JSON.
func protoJSON(m proto.Message) (json.RawMessage, error) {
	return protojson.Marshal(m)
}
