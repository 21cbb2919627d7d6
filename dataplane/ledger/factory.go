package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Factory opens managed ledgers on one ledger client and metadata store,
// and owns the entry cache they share. It is safe for concurrent use.
type Factory struct {
	client *client.Client
	md     metadata.Store
	defs   Config
	log    *slog.Logger
	cache  *entryCache
	pacer  *readPacer
	// offloader is the tiered storage, nil without one.
	offloader Offloader

	mu      sync.Mutex
	closed  bool
	ledgers map[string]ledgerSlot
	configs map[Config]*Config // see intern
}

// ledgerSlot is a registered managed ledger: open (ml) or being opened
// (fut). An open one costs the registry no allocation of its own.
type ledgerSlot struct {
	ml  *ManagedLedger
	fut *openFuture
}

// openFuture is a managed ledger being opened; concurrent Opens of one name
// share it, and find the outcome in it once done is closed.
type openFuture struct {
	done chan struct{}
	mode openMode
	ml   *ManagedLedger
	err  error
}

// NewFactory returns a Factory.
func NewFactory(cfg FactoryConfig) (*Factory, error) {
	if cfg.Client == nil || cfg.Metadata == nil {
		return nil, fmt.Errorf("%w: FactoryConfig.Client and Metadata are required", ErrConfig)
	}
	defs := cfg.Defaults.WithDefaults()
	if err := defs.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Factory{
		client:    cfg.Client,
		md:        cfg.Metadata,
		defs:      defs,
		log:       cfg.Logger,
		cache:     newEntryCache(defs.CacheSize),
		pacer:     &readPacer{rate: float64(cfg.BacklogReadRate)},
		offloader: cfg.Offloader,
		ledgers:   map[string]ledgerSlot{},
	}, nil
}

// openMode says what Open does about the managed ledger's record.
type openMode int

const (
	openOrCreate openMode = iota // Open: create the record if absent
	openExisting                 // OpenExisting: ErrNotFound if absent
	createNew                    // Create: ErrExists if present
)

// Open opens (creating if needed) the managed ledger name and makes this
// factory its single writer; see the package documentation. A managed
// ledger already open in this factory is returned as is (cfg is then
// ignored). cfg nil means the factory's defaults.
func (f *Factory) Open(ctx context.Context, name string, cfg *Config) (*ManagedLedger, error) {
	return f.open(ctx, name, cfg, openOrCreate, nil)
}

// OpenExisting is Open for a managed ledger that must exist: without a
// stored record it fails with ErrNotFound and creates nothing. It spares
// the caller a separate Exists.
func (f *Factory) OpenExisting(ctx context.Context, name string, cfg *Config) (*ManagedLedger, error) {
	return f.open(ctx, name, cfg, openExisting, nil)
}

// Create creates the managed ledger name and opens it, as Open does; it
// fails with ErrExists if the managed ledger exists (stored, or open in
// this factory). A new managed ledger has nothing to recover, so creating
// it is a single metadata write.
func (f *Factory) Create(ctx context.Context, name string, cfg *Config) (*ManagedLedger, error) {
	return f.open(ctx, name, cfg, createNew, nil)
}

// CreateUnless is Create that also fails with ErrExists, in the same
// metadata write, when any metadata key of absent exists (the broker
// guards a topic's name against a partitioned topic of that name).
func (f *Factory) CreateUnless(ctx context.Context, name string, cfg *Config, absent ...string) (*ManagedLedger, error) {
	return f.open(ctx, name, cfg, createNew, absent)
}

func (f *Factory) open(ctx context.Context, name string, cfg *Config, mode openMode, absent []string) (*ManagedLedger, error) {
	if err := checkName("managed ledger", name); err != nil {
		return nil, err
	}
	c := f.defs
	if cfg != nil {
		c = mergeConfig(*cfg, f.defs)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil, fmt.Errorf("%w: factory", ErrClosed)
		}
		sl, ok := f.ledgers[name]
		if sl.ml != nil {
			f.mu.Unlock()
			if mode == createNew {
				return nil, fmt.Errorf("%w: managed ledger %q", ErrExists, name)
			}
			return sl.ml, nil
		}
		if ok {
			fut := sl.fut
			f.mu.Unlock()
			select {
			case <-fut.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if fut.err != nil {
				if fut.mode == mode {
					return nil, fut.err
				}
				// It failed for a reason of its own mode (an open of a
				// missing record, a create of an existing one): try ours.
				continue
			}
			if mode == createNew {
				return nil, fmt.Errorf("%w: managed ledger %q", ErrExists, name)
			}
			return fut.ml, nil
		}
		fut := &openFuture{done: make(chan struct{}), mode: mode}
		f.ledgers[name] = ledgerSlot{fut: fut}
		f.mu.Unlock()

		ml, err := openManagedLedger(ctx, f, name, f.intern(c), mode, absent)
		f.mu.Lock()
		fut.ml, fut.err = ml, err
		if err != nil {
			delete(f.ledgers, name)
		} else {
			f.ledgers[name] = ledgerSlot{ml: ml}
		}
		close(fut.done)
		f.mu.Unlock()
		return ml, err
	}
}

// intern returns the one shared copy of c: a topic's managed ledger keeps
// its effective configuration by pointer, and the topics of a namespace
// (often of a whole broker) have the same one, so a million topics need not
// hold a million copies. The set only grows by distinct configurations,
// which namespaces' policies bound.
func (f *Factory) intern(c Config) *Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.configs[c]; ok {
		return p
	}
	if f.configs == nil {
		f.configs = make(map[Config]*Config)
	}
	p := &c
	f.configs[c] = p
	return p
}

// forget removes a closed managed ledger from the registry.
func (f *Factory) forget(ml *ManagedLedger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledgers[ml.name].ml == ml {
		delete(f.ledgers, ml.name)
	}
}

// Exists reports whether a managed ledger of that name has a record.
func (f *Factory) Exists(ctx context.Context, name string) (bool, error) {
	if err := checkName("managed ledger", name); err != nil {
		return false, err
	}
	_, err := f.md.Get(ctx, infoKey(name))
	if errors.Is(err, metadata.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// List returns the names of the stored managed ledgers that start with
// prefix, sorted by their escaped form.
func (f *Factory) List(ctx context.Context, prefix string) ([]string, error) {
	kids, err := f.md.Children(ctx, infoRoot)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range kids {
		name, err := unescapeName(k)
		if err != nil {
			continue // not ours
		}
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out, nil
}

// Delete removes a managed ledger: it closes it if open here, then deletes
// its cursors (with the side ledgers they name), its bookie ledgers and
// finally its record. The caller must own the topic (no other factory may
// have it open). ErrNotFound if there is no such managed ledger.
func (f *Factory) Delete(ctx context.Context, name string) error {
	if err := checkName("managed ledger", name); err != nil {
		return err
	}
	f.mu.Lock()
	sl := f.ledgers[name]
	f.mu.Unlock()
	ml := sl.ml
	if sl.fut != nil {
		select {
		case <-sl.fut.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		ml = sl.fut.ml
	}
	if ml != nil {
		if err := ml.Close(ctx); err != nil && !errors.Is(err, ErrFenced) {
			return err
		}
	}
	kv, err := f.md.Get(ctx, infoKey(name))
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: managed ledger %q", ErrNotFound, name)
	}
	if err != nil {
		return err
	}
	var rec mlInfo
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return fmt.Errorf("ledger: managed ledger %q: corrupt record: %w", name, err)
	}
	curs, err := f.md.Children(ctx, cursorsParent(name))
	if err != nil {
		return err
	}
	var side []int64
	for _, c := range curs {
		key := cursorsParent(name) + "/" + c
		if ckv, err := f.md.Get(ctx, key); err == nil {
			var info cursorInfo
			if json.Unmarshal(ckv.Value, &info) == nil {
				side = append(side, sideLedgers(info.Properties)...)
			}
		}
		if err := f.md.Delete(ctx, key, metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
			return err
		}
	}
	for _, id := range side {
		if err := deleteSideLedger(ctx, f.client, id); err != nil {
			return fmt.Errorf("ledger: managed ledger %q: %w", name, err)
		}
	}
	for _, l := range rec.Ledgers {
		if l.Offload != nil && f.offloader != nil {
			if err := f.offloader.DeleteOffloaded(ctx, l.ID, l.Offload.UID, l.Offload.Metadata); err != nil {
				return fmt.Errorf("ledger: delete offloaded copy of ledger %d of %q: %w", l.ID, name, err)
			}
		}
		if l.Offload != nil && l.Offload.BookieDeleted {
			continue
		}
		if err := f.client.DeleteLedger(ctx, l.ID); err != nil && !errors.Is(err, client.ErrNoSuchLedger) {
			return fmt.Errorf("ledger: delete bookie ledger %d of %q: %w", l.ID, name, err)
		}
	}
	if err := f.md.Delete(ctx, infoKey(name), kv.Version); err != nil {
		if errors.Is(err, metadata.ErrBadVersion) {
			return fmt.Errorf("%w: %q changed while being deleted", ErrFenced, name)
		}
		return err
	}
	return nil
}

// Close closes every managed ledger open in the factory (each within the
// OperationTimeout of the defaults) and refuses further Opens.
func (f *Factory) Close() error {
	var errs []error
	for _, ml := range f.closeAll() {
		ctx, cancel := context.WithTimeout(context.Background(), f.defs.OperationTimeout)
		if err := ml.Close(ctx); err != nil && !errors.Is(err, ErrFenced) {
			errs = append(errs, fmt.Errorf("%s: %w", ml.name, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// closeAll refuses further Opens and returns the registered managed
// ledgers once the opens under way have completed.
func (f *Factory) closeAll() []*ManagedLedger {
	f.mu.Lock()
	f.closed = true
	slots := make([]ledgerSlot, 0, len(f.ledgers))
	for _, sl := range f.ledgers {
		slots = append(slots, sl)
	}
	f.mu.Unlock()
	mls := make([]*ManagedLedger, 0, len(slots))
	for _, sl := range slots {
		ml := sl.ml
		if sl.fut != nil {
			<-sl.fut.done
			ml = sl.fut.ml
		}
		if ml != nil {
			mls = append(mls, ml)
		}
	}
	return mls
}

// crash stops every managed ledger's goroutines without closing ledgers or
// writing metadata, as if the process died (tests).
func (f *Factory) crash() {
	for _, ml := range f.closeAll() {
		ml.crash()
	}
}

func nowMillis() int64 { return time.Now().UnixMilli() }
