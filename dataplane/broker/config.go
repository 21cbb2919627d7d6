package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// Config configures a broker Service. Zero values take the documented
// defaults (WithDefaults).
type Config struct {
	// ClusterName is the cluster this broker belongs to. Default "standalone".
	ClusterName string
	// TopicLevelMetrics adds per-topic and per-subscription series to
	// /metrics (topicmetrics.go; Pulsar's
	// exposeTopicLevelMetricsInPrometheus, which Pulsar turns on by
	// default). Default false: rendering them allocates per topic on every
	// scrape, and the region agent scrapes every 500 ms, so a broker with
	// thousands of topics would never be idle.
	TopicLevelMetrics bool
	// BinaryAddr is the TCP address of the Pulsar binary protocol.
	// Default 127.0.0.1:6650.
	BinaryAddr string
	// AdvertisedAddr is the host:port clients are sent to by lookups.
	// Default: the address BinaryAddr is bound to.
	AdvertisedAddr string
	// WebServiceURL is the admin/HTTP URL returned by HTTP lookups.
	WebServiceURL string
	// TLSAddr, when set, serves the binary protocol over TLS (Pulsar's
	// 6651) with TLSConfig, beside BinaryAddr. BinaryAddr "off" serves TLS
	// only.
	TLSAddr   string
	TLSConfig *tls.Config
	// AdvertisedTLSAddr is the host:port of pulsar+ssl:// URLs in lookups.
	// Default: AdvertisedAddr's host with TLSAddr's bound port.
	AdvertisedTLSAddr string
	// WebServiceURLTLS is the https:// admin URL returned by lookups.
	WebServiceURLTLS string
	// PeerTLS is the client TLS configuration of calls to the cluster's
	// other brokers over https:// (a load-manager unload or split, a
	// namespace unload forwarded to a bundle's owner; Pulsar's
	// brokerClientTrustCertsFilePath and its kin). Nil: the system's roots.
	PeerTLS *tls.Config
	// Authenticator, when set, requires clients to authenticate (package
	// auth; Pulsar's authenticationEnabled).
	Authenticator *auth.Authenticator
	// Authorizer, when set with Authenticator, authorizes every lookup,
	// producer, subscription and admin call (authorizationEnabled).
	Authorizer *auth.Authorizer
	// MaxMessageSize is the largest message (headers and payload) accepted
	// and announced in CONNECTED. Default 5 MiB.
	MaxMessageSize int
	// KeepAliveInterval: the broker pings a client silent for this long and
	// closes the connection after twice as long. Default 30s.
	KeepAliveInterval time.Duration
	// AllowAutoTopicCreation creates topics on first use unless a namespace
	// policy says otherwise. Default true (set DisableAutoTopicCreation).
	DisableAutoTopicCreation bool
	// MaxPendingPublishBytes is the broker-wide memory for messages received
	// and not yet persisted; when it is full, producers' connections stop
	// being read until writes complete. Default 64 MiB.
	MaxPendingPublishBytes int64
	// MaxPendingPublishPerConnection is the most SENDs of one connection
	// received and not yet persisted; at the limit the broker stops
	// reading that connection until writes complete, so one producer on a
	// slow topic cannot take the whole MaxPendingPublishBytes from the
	// others (Pulsar's maxPendingPublishRequestsPerConnection). Default 1000.
	MaxPendingPublishPerConnection int
	// MessageTTLCheckInterval is how often messages older than their
	// namespace's TTL are expired. Default 60s (Pulsar's is 5 min).
	MessageTTLCheckInterval time.Duration
	// BacklogQuotaCheckInterval is how often backlog quotas are checked in
	// the background: consumer_backlog_eviction is enforced and, for
	// message_age quotas, the publish time of each subscription's oldest
	// unacknowledged message is measured. Producers are checked against
	// size quotas on their own, at most once a second. Default 60s
	// (Pulsar's backlogQuotaCheckIntervalInSeconds).
	BacklogQuotaCheckInterval time.Duration
	// CompactionCheckInterval is how often topics are checked against
	// their compactionThreshold and compacted when past it. Default 60s
	// (Pulsar's brokerServiceCompactionMonitorIntervalInSeconds).
	CompactionCheckInterval time.Duration
	// MaxUnackedMessagesPerConsumer is the broker's default of the
	// max_unacked_messages_per_consumer policy: a Shared or Key_Shared
	// consumer holding this many unacknowledged messages gets no more until
	// it acknowledges half of them. Default 50000 (Pulsar's); -1: no limit.
	MaxUnackedMessagesPerConsumer int
	// MaxUnackedMessagesPerSubscription is the default of
	// max_unacked_messages_per_subscription: a Shared or Key_Shared
	// subscription whose consumers hold this many stops dispatching until
	// half are acknowledged. Default 200000 (Pulsar's); -1: no limit.
	MaxUnackedMessagesPerSubscription int
	// DispatchBatch is the most entries a subscription reads at once.
	// Default 100.
	DispatchBatch int
	// SessionTTL is the broker's metadata session lease: after a crash or a
	// cut from the metadata store, its bundles are free for other brokers
	// this long afterwards. Default 3s (writes resume within ~5s of a
	// broker's death; Pulsar's ZooKeeper session default is 30s).
	SessionTTL time.Duration
	// DefaultBundles is the number of bundles a namespace without explicit
	// bundles is split into. Default 4.
	DefaultBundles int
	// LoadShedding enables the load manager's unloading of bundles from
	// overloaded brokers and splitting of hot bundles (on the leader).
	// Default off in a standalone, on in `magnetar broker`.
	LoadShedding bool
	// LoadReportInterval is how often the broker publishes its load report.
	// Default 5s.
	LoadReportInterval time.Duration
	// LoadManagerInterval is how often the elected load manager decides.
	// Default 15s.
	LoadManagerInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.ClusterName == "" {
		cfg.ClusterName = "standalone"
	}
	if cfg.BinaryAddr == "" {
		cfg.BinaryAddr = "127.0.0.1:6650"
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = protocol.DefaultMaxMessageSize
	}
	if cfg.KeepAliveInterval == 0 {
		cfg.KeepAliveInterval = 30 * time.Second
	}
	if cfg.MaxPendingPublishBytes == 0 {
		cfg.MaxPendingPublishBytes = 64 << 20
	}
	if cfg.MaxPendingPublishPerConnection == 0 {
		cfg.MaxPendingPublishPerConnection = 1000
	}
	if cfg.MessageTTLCheckInterval == 0 {
		cfg.MessageTTLCheckInterval = time.Minute
	}
	if cfg.BacklogQuotaCheckInterval == 0 {
		cfg.BacklogQuotaCheckInterval = time.Minute
	}
	if cfg.CompactionCheckInterval == 0 {
		cfg.CompactionCheckInterval = time.Minute
	}
	if cfg.MaxUnackedMessagesPerConsumer == 0 {
		cfg.MaxUnackedMessagesPerConsumer = 50000
	}
	if cfg.MaxUnackedMessagesPerSubscription == 0 {
		cfg.MaxUnackedMessagesPerSubscription = 200000
	}
	if cfg.DispatchBatch == 0 {
		cfg.DispatchBatch = 100
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 3 * time.Second
	}
	if cfg.DefaultBundles == 0 {
		cfg.DefaultBundles = 4
	}
	if cfg.LoadReportInterval <= 0 {
		cfg.LoadReportInterval = 5 * time.Second
	}
	if cfg.LoadManagerInterval <= 0 {
		cfg.LoadManagerInterval = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Validate checks the configuration.
func (cfg Config) Validate() error {
	if cfg.TLSAddr != "" && cfg.TLSConfig == nil {
		return errors.New("broker: TLSAddr needs a TLSConfig")
	}
	if cfg.BinaryAddr == "off" {
		if cfg.TLSAddr == "" {
			return errors.New("broker: BinaryAddr off needs a TLSAddr")
		}
	} else if _, _, err := net.SplitHostPort(cfg.BinaryAddr); err != nil {
		return fmt.Errorf("broker: BinaryAddr %q: %w", cfg.BinaryAddr, err)
	}
	if cfg.AdvertisedAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.AdvertisedAddr); err != nil {
			return fmt.Errorf("broker: AdvertisedAddr %q: %w", cfg.AdvertisedAddr, err)
		}
	}
	if cfg.MaxMessageSize < 1024 {
		return errors.New("broker: MaxMessageSize must be at least 1 KiB")
	}
	if cfg.KeepAliveInterval < 0 || cfg.MaxPendingPublishBytes < int64(cfg.MaxMessageSize) || cfg.DispatchBatch < 1 {
		return errors.New("broker: KeepAliveInterval must be >= 0, MaxPendingPublishBytes >= MaxMessageSize, DispatchBatch >= 1")
	}
	if cfg.MaxPendingPublishPerConnection < 1 || cfg.MessageTTLCheckInterval <= 0 || cfg.BacklogQuotaCheckInterval <= 0 || cfg.CompactionCheckInterval <= 0 {
		return errors.New("broker: MaxPendingPublishPerConnection must be >= 1, MessageTTLCheckInterval, BacklogQuotaCheckInterval and CompactionCheckInterval > 0")
	}
	return nil
}
