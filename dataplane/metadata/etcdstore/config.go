package etcdstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Sentinel errors of this package.
var (
	// ErrBadConfig wraps every Config and EmbeddedConfig validation failure.
	ErrBadConfig = errors.New("etcdstore: invalid config")
	// ErrServerStopped is returned by a Server that stopped by itself.
	ErrServerStopped = errors.New("etcdstore: etcd server stopped")
)

// Client defaults.
const (
	DefaultDialTimeout = 5 * time.Second
	// DefaultPageSize is how many keys one range request of Children reads.
	DefaultPageSize = 1000
	// DefaultCloseTimeout bounds the lease revocations of Store.Close.
	DefaultCloseTimeout = 2 * time.Second
)

// Config configures a client Store.
type Config struct {
	// Endpoints are the client URLs of the etcd members
	// ("http://127.0.0.1:2379"). Required.
	Endpoints []string
	// DialTimeout bounds the first connection. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// Prefix namespaces every key of the store: key K is stored in etcd as
	// Prefix+K, so several stores (test runs, clusters) can share one etcd.
	// Empty (the default) or a valid metadata path such as "/magnetar/c1".
	Prefix string
	// PageSize is how many keys one range request of Children reads.
	// Default DefaultPageSize.
	PageSize int
	// CloseTimeout bounds the lease revocations done by Close. Default
	// DefaultCloseTimeout.
	CloseTimeout time.Duration
	// Username and Password authenticate the client when set.
	Username, Password string
	// TLS is the client's TLS configuration for https:// endpoints (trust
	// bundle; a client certificate for members that require one). Nil
	// with https:// endpoints: the system's roots and no client
	// certificate. Endpoints are all http:// or all https://; TLS with
	// http:// endpoints is a configuration error.
	TLS *tls.Config
	// Logger receives the etcd client's logs. Default: errors only, to stderr.
	Logger *zap.Logger
}

// Validate reports whether the config is usable.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("%w: no endpoints", ErrBadConfig)
	}
	if c.Prefix != "" {
		if err := metadata.ValidateKey(c.Prefix); err != nil {
			return fmt.Errorf("%w: prefix: %w", ErrBadConfig, err)
		}
	}
	https := 0
	for _, e := range c.Endpoints {
		if strings.HasPrefix(e, "https://") {
			https++
		}
	}
	if https != 0 && https != len(c.Endpoints) {
		return fmt.Errorf("%w: endpoints %v mix http:// and https://", ErrBadConfig, c.Endpoints)
	}
	if https == 0 && c.TLS != nil {
		return fmt.Errorf("%w: TLS is configured but endpoints %v are not https://", ErrBadConfig, c.Endpoints)
	}
	if c.DialTimeout < 0 || c.CloseTimeout < 0 || c.PageSize < 0 {
		return fmt.Errorf("%w: negative DialTimeout, CloseTimeout or PageSize", ErrBadConfig)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = errorLogger()
	}
	if c.TLS == nil && len(c.Endpoints) > 0 && strings.HasPrefix(c.Endpoints[0], "https://") {
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return c
}

// errorLogger logs errors only, as JSON to stderr.
func errorLogger() *zap.Logger {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	zc.Sampling = nil
	lg, err := zc.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}
