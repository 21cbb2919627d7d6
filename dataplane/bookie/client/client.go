package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie"
	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Errors returned by the ledger client.
var (
	ErrBadQuorum          = errors.New("ledger: invalid quorum")
	ErrNotEnoughBookies   = errors.New("ledger: not enough bookies")
	ErrNoSuchLedger       = errors.New("ledger: no such ledger")
	ErrNoSuchEntry        = errors.New("ledger: no such entry")
	ErrLedgerClosed       = errors.New("ledger: ledger closed")
	ErrFenced             = errors.New("ledger: ledger fenced by another client")
	ErrRecoveryIncomplete = errors.New("ledger: recovery could not decide an entry")
	ErrNoQuorum           = errors.New("ledger: could not reach a quorum of bookies")
	ErrClientClosed       = errors.New("ledger: client closed")
)

// BookieConn is one bookie as the ledger client uses it. *wire.Conn
// implements it; see package wire for the contract of each call.
type BookieConn interface {
	Add(req *wire.AddRequest, done wire.AddDone)
	Read(ctx context.Context, ledgerID, entryID int64, flags wire.ReadFlags) (wire.Entry, error)
	ReadLAC(ctx context.Context, ledgerID int64) (lac, lastEntry int64, err error)
	Fence(ctx context.Context, ledgerID int64) (lac int64, err error)
	DeleteLedger(ctx context.Context, ledgerID int64) error
}

// Dialer returns a live connection to the bookie at addr.
type Dialer interface {
	Get(ctx context.Context, addr string) (BookieConn, error)
}

// PoolDialer adapts a *wire.Pool to Dialer.
type PoolDialer struct{ Pool *wire.Pool }

// Get implements Dialer.
func (d PoolDialer) Get(ctx context.Context, addr string) (BookieConn, error) {
	c, err := d.Pool.Get(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Config configures a Client.
type Config struct {
	// Metadata is the metadata store holding ledger metadata and bookie
	// registrations. Required.
	Metadata metadata.Store
	// Dialer connects to bookies. Required.
	Dialer Dialer
	// AddTimeout bounds how long adds may wait without any of them being
	// acknowledged while a bookie of the ledger is failed and neither
	// replaced nor back; they then fail with ErrNotEnoughBookies.
	// Default 30s.
	AddTimeout time.Duration
	// SpeculativeReadTimeout is how long a read waits for one replica before
	// also asking the next. Default 100ms.
	SpeculativeReadTimeout time.Duration
	// ReadTimeout bounds one entry read across all replicas. Default 10s.
	ReadTimeout time.Duration
	// BookieListTTL is how long the list of available bookies read for
	// new ledgers' ensembles is reused. A bookie that registers meanwhile
	// is found at once when the list has too few; one that went away is
	// replaced on the first failed write (ensemble change, whose first
	// round reads the list afresh; its retries use this list, so a failed
	// bookie that restarts is taken back within about BookieListTTL).
	// Default 1s; negative: read it every time.
	BookieListTTL time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.AddTimeout == 0 {
		c.AddTimeout = 30 * time.Second
	}
	if c.SpeculativeReadTimeout == 0 {
		c.SpeculativeReadTimeout = 100 * time.Millisecond
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 10 * time.Second
	}
	if c.BookieListTTL == 0 {
		c.BookieListTTL = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.Metadata == nil {
		return errors.New("ledger: Config.Metadata is required")
	}
	if c.Dialer == nil {
		return errors.New("ledger: Config.Dialer is required")
	}
	if c.AddTimeout < 0 || c.SpeculativeReadTimeout < 0 || c.ReadTimeout < 0 {
		return errors.New("ledger: timeouts must not be negative")
	}
	return nil
}

// Client creates, opens, recovers and deletes ledgers. It is safe for
// concurrent use.
type Client struct {
	cfg     Config
	meta    metaStore
	log     *slog.Logger
	ids     idAllocator
	bookies bookieList

	rndMu sync.Mutex
	rnd   *rand.Rand
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Client{
		cfg:     cfg,
		meta:    metaStore{cfg.Metadata},
		log:     cfg.Logger,
		ids:     idAllocator{md: cfg.Metadata},
		bookies: bookieList{md: cfg.Metadata, ttl: cfg.BookieListTTL},
		rnd:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6d61676e)),
	}, nil
}

// CreateOptions are a new ledger's replication settings.
type CreateOptions struct {
	Ensemble, WriteQuorum, AckQuorum int
	// Custom is stored with the ledger's metadata.
	Custom map[string]string
	// After, when positive, makes the new ledger's id greater than it (a
	// managed ledger passes its last ledger's id: its ledgers are ordered
	// by id).
	After int64
}

// CreateLedger picks an ensemble from the available bookies, records the
// ledger's metadata (state OPEN) and returns its writer.
func (c *Client) CreateLedger(ctx context.Context, opts CreateOptions) (*WriteHandle, error) {
	m := &LedgerMetadata{
		Ensemble: opts.Ensemble, WriteQuorum: opts.WriteQuorum, AckQuorum: opts.AckQuorum,
		State: StateOpen, LastEntry: -1, CreatedAt: time.Now().UTC(), Custom: opts.Custom,
	}
	if err := m.validateQuorum(); err != nil {
		return nil, err
	}
	avail, err := c.bookies.get(ctx)
	if err != nil {
		return nil, err
	}
	c.rndMu.Lock()
	ens, err := chooseEnsemble(c.rnd, avail, m.Ensemble, nil)
	c.rndMu.Unlock()
	if errors.Is(err, ErrNotEnoughBookies) && c.cfg.BookieListTTL > 0 {
		// The list may predate bookies that registered since.
		if avail, err = availableBookies(ctx, c.cfg.Metadata); err != nil {
			return nil, err
		}
		c.rndMu.Lock()
		ens, err = chooseEnsemble(c.rnd, avail, m.Ensemble, nil)
		c.rndMu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	m.Fragments = []Fragment{{FirstEntry: 0, Bookies: ens}}
	// An id is taken by whoever creates its record first: a client still
	// allocating ids one at a time (before blocks) may have used one of
	// ours, which is then skipped.
	after := opts.After
	for range 100 {
		id, err := c.ids.take(ctx, after)
		if err != nil {
			return nil, err
		}
		m.ID = id
		err = c.meta.create(ctx, m)
		if errors.Is(err, metadata.ErrExists) {
			after = id
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ledger %d: create metadata: %w", id, err)
		}
		return newWriteHandle(ctx, c, m)
	}
	return nil, fmt.Errorf("ledger: create metadata: every id tried was taken")
}

// LedgerMetadata returns a ledger's current metadata.
func (c *Client) LedgerMetadata(ctx context.Context, id int64) (*LedgerMetadata, error) {
	return c.meta.read(ctx, id)
}

// Ledgers lists the ids of all ledgers.
func (c *Client) Ledgers(ctx context.Context) ([]int64, error) { return c.meta.list(ctx) }

// DeleteLedger removes a ledger's metadata, then asks every bookie that
// holds part of it to delete it (bookies that cannot be reached now keep
// the data until their garbage collection finds the ledger gone).
func (c *Client) DeleteLedger(ctx context.Context, id int64) error {
	m, err := c.meta.read(ctx, id)
	if err != nil {
		return err
	}
	if err := c.meta.delete(ctx, id); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, f := range m.Fragments {
		for _, addr := range f.Bookies {
			if seen[addr] {
				continue
			}
			seen[addr] = true
			conn, err := c.cfg.Dialer.Get(ctx, addr)
			if err == nil {
				err = conn.DeleteLedger(ctx, id)
			}
			if err != nil && !errors.Is(err, wire.ErrNoSuchLedger) {
				c.log.Warn("ledger delete on bookie failed", "ledger", id, "bookie", addr, "err", err)
			}
		}
	}
	return nil
}

// pickReplacement picks a bookie outside fragment from avail to replace
// fragment[idx], and connects to it.
func (c *Client) pickReplacement(ctx context.Context, avail []bookie.Registration, fragment []string, idx int) (string, BookieConn, bool) {
	c.rndMu.Lock()
	addr, err := chooseReplacement(c.rnd, avail, fragment, idx)
	c.rndMu.Unlock()
	if err != nil {
		return "", nil, false
	}
	conn, err := c.cfg.Dialer.Get(ctx, addr)
	if err != nil {
		return "", nil, false
	}
	return addr, conn, true
}

// takeBackProbeTimeout bounds the request that shows a failed bookie
// answers again.
const takeBackProbeTimeout = time.Second

// takeBack returns a connection to the failed bookie at addr if it may
// rejoin the ensemble of ledger id: it is registered in avail and
// writable, and answers a request about the ledger (a connection that
// only timed out may still be the one in the pool; any answer from the
// bookie, "no such ledger" included, shows it serves again).
func (c *Client) takeBack(ctx context.Context, avail []bookie.Registration, addr string, id int64) (BookieConn, bool) {
	i := slices.IndexFunc(avail, func(r bookie.Registration) bool { return r.Addr == addr })
	if i < 0 || avail[i].ReadOnly {
		return nil, false
	}
	conn, err := c.cfg.Dialer.Get(ctx, addr)
	if err != nil {
		return nil, false
	}
	pctx, cancel := context.WithTimeout(ctx, takeBackProbeTimeout)
	defer cancel()
	if _, _, err := conn.ReadLAC(pctx, id); err != nil && !errors.Is(err, wire.ErrNoSuchLedger) && !errors.Is(err, wire.ErrNoSuchEntry) {
		return nil, false
	}
	return conn, true
}
