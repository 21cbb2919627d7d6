package ledger

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Defaults of Config.
const (
	DefaultEnsemble              = 1
	DefaultWriteQuorum           = 1
	DefaultAckQuorum             = 1
	DefaultMaxEntriesPerLedger   = 50000
	DefaultMaxLedgerSize         = 256 << 20
	DefaultMaxLedgerAge          = 4 * time.Hour
	DefaultMinLedgerAge          = 10 * time.Minute
	DefaultCacheSize             = 64 << 20
	DefaultCursorPersistInterval = 100 * time.Millisecond
	DefaultMaxPersistedAckRanges = 10000
	DefaultTrimCheckInterval     = time.Minute
	DefaultOperationTimeout      = 30 * time.Second
)

// Config are the settings of one managed ledger. Zero fields take the
// defaults above, except RetentionTime and RetentionSize whose zero is
// meaningful.
type Config struct {
	// Ensemble, WriteQuorum, AckQuorum of each bookie ledger (E >= Qw >=
	// Qa >= 1). Default 1/1/1.
	Ensemble, WriteQuorum, AckQuorum int
	// A ledger is rolled over once it holds MaxEntriesPerLedger entries or
	// MaxLedgerSize payload bytes and is at least MinLedgerAge old, or
	// once it is MaxLedgerAge old and not empty. Defaults 50000 entries,
	// 256 MiB, 10 min, 4 h. A negative MinLedgerAge means no minimum.
	MaxEntriesPerLedger int64
	MaxLedgerSize       int64
	MinLedgerAge        time.Duration
	MaxLedgerAge        time.Duration
	// RetentionTime and RetentionSize keep consumed ledgers (fully below
	// every durable cursor's mark-delete position). A consumed ledger is
	// deleted when it was closed more than RetentionTime ago, or when the
	// managed ledger without it would still hold more than RetentionSize
	// bytes. -1 disables that limit (both -1: keep everything); both 0
	// (the default): delete consumed ledgers at once. One 0 with the other
	// non-zero is rejected, as in Pulsar.
	RetentionTime time.Duration
	RetentionSize int64
	// CacheSize is the byte budget of the tailing-read cache. It is a
	// factory-wide setting: only FactoryConfig.Defaults.CacheSize is
	// used. Default 64 MiB; negative disables the cache.
	CacheSize int64
	// CursorPersistInterval is the longest a durable cursor's change
	// waits before it is written to the metadata store. Default 100 ms.
	CursorPersistInterval time.Duration
	// MaxPersistedAckRanges bounds the individually acknowledged ranges
	// written per cursor (the lowest ones are kept; the others are
	// redelivered after a restart). Default 10000.
	MaxPersistedAckRanges int
	// TrimCheckInterval is how often consumed ledgers are checked against
	// the retention time even when no cursor moves. Default 1 min.
	TrimCheckInterval time.Duration
	// OperationTimeout bounds background metadata and bookie operations
	// (ledger creation, closing, trimming). Default 30 s.
	OperationTimeout time.Duration
	// Offload says when closed ledgers are copied to tiered storage
	// (FactoryConfig.Offloader) and their bookie copies deleted. The zero
	// value takes the factory's; by default nothing is offloaded.
	Offload OffloadPolicy
}

// WithDefaults returns c with zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	setInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setInt(&c.Ensemble, DefaultEnsemble)
	setInt(&c.WriteQuorum, DefaultWriteQuorum)
	setInt(&c.AckQuorum, DefaultAckQuorum)
	setInt(&c.MaxPersistedAckRanges, DefaultMaxPersistedAckRanges)
	set64 := func(p *int64, d int64) {
		if *p == 0 {
			*p = d
		}
	}
	set64(&c.MaxEntriesPerLedger, DefaultMaxEntriesPerLedger)
	set64(&c.MaxLedgerSize, DefaultMaxLedgerSize)
	set64(&c.CacheSize, DefaultCacheSize)
	setDur := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setDur(&c.MinLedgerAge, DefaultMinLedgerAge)
	setDur(&c.MaxLedgerAge, DefaultMaxLedgerAge)
	setDur(&c.CursorPersistInterval, DefaultCursorPersistInterval)
	setDur(&c.TrimCheckInterval, DefaultTrimCheckInterval)
	setDur(&c.OperationTimeout, DefaultOperationTimeout)
	return c
}

// Validate checks a config after WithDefaults.
func (c Config) Validate() error {
	var errs []error
	if c.AckQuorum < 1 || c.WriteQuorum < c.AckQuorum || c.Ensemble < c.WriteQuorum {
		errs = append(errs, fmt.Errorf("need ensemble >= write quorum >= ack quorum >= 1, got %d/%d/%d",
			c.Ensemble, c.WriteQuorum, c.AckQuorum))
	}
	if c.MaxEntriesPerLedger < 1 || c.MaxLedgerSize < 1 {
		errs = append(errs, errors.New("ledger entry and size limits must be positive"))
	}
	if c.MaxLedgerAge <= 0 {
		errs = append(errs, errors.New("max ledger age must be positive"))
	}
	if c.RetentionTime < -1 || c.RetentionSize < -1 {
		errs = append(errs, errors.New("retention limits must be -1, 0 or positive"))
	}
	if (c.RetentionTime == 0) != (c.RetentionSize == 0) {
		errs = append(errs, fmt.Errorf("retention time %v and size %d: either both or neither must be 0",
			c.RetentionTime, c.RetentionSize))
	}
	if c.CursorPersistInterval <= 0 || c.TrimCheckInterval <= 0 || c.OperationTimeout <= 0 {
		errs = append(errs, errors.New("intervals and timeouts must be positive"))
	}
	if c.MaxPersistedAckRanges < 1 {
		errs = append(errs, errors.New("max persisted ack ranges must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// FactoryConfig configures a Factory.
type FactoryConfig struct {
	// Client creates, recovers, reads and deletes bookie ledgers. Required.
	Client *client.Client
	// Metadata holds the managed-ledger and cursor records. Required; it
	// should be the store Client uses.
	Metadata metadata.Store
	// Defaults apply to managed ledgers opened with a nil Config, and fill
	// the zero fields of the others.
	Defaults Config
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// BacklogReadRate paces catch-up reads (from the bookies, and from the
	// cache when more than catchupLag bytes behind the newest entry: a
	// subscription catching up on a backlog) at this many
	// payload bytes per second, shared by every managed ledger of the
	// factory, so that a catch-up read leaves CPU and disk to the
	// producers (the "magnetar paced" row of streambench's W6, catch-up
	// next to producers, in docs/benchmarks.md). Zero or negative (the default,
	// as in Pulsar, where dispatch throttling is off by default): no
	// pacing. Tailing consumers' reads are never paced.
	BacklogReadRate int64
	// Offloader copies closed ledgers to tiered storage and reads them
	// back (package offload). nil: no tiered storage.
	Offloader Offloader
}

// mergeConfig fills the zero fields of c from d (both already defaulted
// where it matters); retention is taken from c as given.
func mergeConfig(c, d Config) Config {
	if c.Ensemble == 0 && c.WriteQuorum == 0 && c.AckQuorum == 0 {
		c.Ensemble, c.WriteQuorum, c.AckQuorum = d.Ensemble, d.WriteQuorum, d.AckQuorum
	}
	if c.MaxEntriesPerLedger == 0 {
		c.MaxEntriesPerLedger = d.MaxEntriesPerLedger
	}
	if c.MaxLedgerSize == 0 {
		c.MaxLedgerSize = d.MaxLedgerSize
	}
	if c.MinLedgerAge == 0 {
		c.MinLedgerAge = d.MinLedgerAge
	}
	if c.MaxLedgerAge == 0 {
		c.MaxLedgerAge = d.MaxLedgerAge
	}
	if c.CursorPersistInterval == 0 {
		c.CursorPersistInterval = d.CursorPersistInterval
	}
	if c.MaxPersistedAckRanges == 0 {
		c.MaxPersistedAckRanges = d.MaxPersistedAckRanges
	}
	if c.TrimCheckInterval == 0 {
		c.TrimCheckInterval = d.TrimCheckInterval
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = d.OperationTimeout
	}
	if c.Offload == (OffloadPolicy{}) {
		c.Offload = d.Offload
	} else if c.Offload.DeletionLag == 0 {
		c.Offload.DeletionLag = d.Offload.DeletionLag
	}
	c.CacheSize = d.CacheSize
	return c.WithDefaults()
}
