package bookie

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// Defaults for Config.
const (
	DefaultListenAddr          = "127.0.0.1:3181"
	DefaultMaxInflightPerConn  = 10000
	DefaultSessionTTL          = 10 * time.Second
	DefaultReadOnlyPollPeriod  = time.Second
	DefaultRegistrationBackoff = 100 * time.Millisecond
)

// Config configures a bookie server. Zero fields take the documented
// defaults (see WithDefaults).
type Config struct {
	// ID names the bookie in metadata (cookie, registration) and in the
	// handshake. Default: the advertised address. It must not contain '/'.
	ID string
	// ListenAddr is the TCP address to listen on. Default 127.0.0.1:3181;
	// port 0 picks a free port.
	ListenAddr string
	// AdvertisedAddr is the address clients dial, published in the
	// registration. Default: the listener's actual address.
	AdvertisedAddr string
	// DataDir holds the instance cookie file. Required when a metadata
	// store is given.
	DataDir string
	// Rack and Region are placement labels published in the registration.
	Rack, Region string
	// MaxFrameSize bounds one frame. Default wire.DefaultMaxFrameSize.
	MaxFrameSize int
	// MaxInflightPerConn bounds the requests of one connection that are read
	// but not yet answered; at the limit the server stops reading that
	// connection. Default 10000.
	MaxInflightPerConn int
	// SessionTTL is the metadata session TTL of the registration. Default 10s.
	SessionTTL time.Duration
	// ReadOnlyPollPeriod is how often the storage's read-only state is
	// checked to update the registration. Default 1s.
	ReadOnlyPollPeriod time.Duration
	// TLS, when set, makes the listener serve TLS only: every connection
	// starts with a TLS handshake (bounded by TLSHandshakeTimeout), and a
	// client that speaks the plain protocol is disconnected. Its
	// certificate and ClientAuth decide what clients must present
	// (auth.CertReloader's ServerConfig re-reads the files when they
	// change). Nil: plain TCP.
	TLS *tls.Config
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
}

// TLSHandshakeTimeout bounds the TLS handshake of a new connection.
const TLSHandshakeTimeout = 10 * time.Second

// WithDefaults returns cfg with zero fields set to their defaults (ID and
// AdvertisedAddr stay empty when they depend on the listener).
func (cfg Config) WithDefaults() Config {
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = DefaultListenAddr
	}
	if cfg.ID == "" {
		cfg.ID = cfg.AdvertisedAddr
	}
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = wire.DefaultMaxFrameSize
	}
	if cfg.MaxInflightPerConn == 0 {
		cfg.MaxInflightPerConn = DefaultMaxInflightPerConn
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.ReadOnlyPollPeriod == 0 {
		cfg.ReadOnlyPollPeriod = DefaultReadOnlyPollPeriod
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Validate checks a config after defaults are applied.
func (cfg Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(cfg.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("listen address %q: %w", cfg.ListenAddr, err))
	}
	if cfg.AdvertisedAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.AdvertisedAddr); err != nil {
			errs = append(errs, fmt.Errorf("advertised address %q: %w", cfg.AdvertisedAddr, err))
		}
	}
	if strings.Contains(cfg.ID, "/") || len(cfg.ID) > 255 {
		errs = append(errs, fmt.Errorf("id %q: must be at most 255 bytes without '/'", cfg.ID))
	}
	if cfg.MaxFrameSize < wire.MinFrameSize+64 {
		errs = append(errs, fmt.Errorf("max frame size %d too small", cfg.MaxFrameSize))
	}
	if cfg.MaxInflightPerConn < 1 {
		errs = append(errs, fmt.Errorf("max in-flight per connection %d: must be positive", cfg.MaxInflightPerConn))
	}
	if cfg.SessionTTL < 0 || cfg.ReadOnlyPollPeriod < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}
