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

	mu      sync.Mutex
	closed  bool
	ledgers map[string]*openFuture
}

// openFuture is a managed ledger being opened or open; concurrent Opens of
// one name share it.
type openFuture struct {
	done chan struct{}
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
		client:  cfg.Client,
		md:      cfg.Metadata,
		defs:    defs,
		log:     cfg.Logger,
		cache:   newEntryCache(defs.CacheSize),
		ledgers: map[string]*openFuture{},
	}, nil
}

// Open opens (creating if needed) the managed ledger name and makes this
// factory its single writer; see the package documentation. A managed
// ledger already open in this factory is returned as is (cfg is then
// ignored). cfg nil means the factory's defaults.
func (f *Factory) Open(ctx context.Context, name string, cfg *Config) (*ManagedLedger, error) {
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
		fut := f.ledgers[name]
		if fut != nil {
			f.mu.Unlock()
			select {
			case <-fut.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if fut.err != nil {
				return nil, fut.err
			}
			return fut.ml, nil
		}
		fut = &openFuture{done: make(chan struct{})}
		f.ledgers[name] = fut
		f.mu.Unlock()

		ml, err := openManagedLedger(ctx, f, name, c)
		f.mu.Lock()
		fut.ml, fut.err = ml, err
		if err != nil {
			delete(f.ledgers, name)
		}
		close(fut.done)
		f.mu.Unlock()
		return ml, err
	}
}

// forget removes a closed managed ledger from the registry.
func (f *Factory) forget(ml *ManagedLedger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fut := f.ledgers[ml.name]; fut != nil && fut.ml == ml {
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
// its cursors, its bookie ledgers and finally its record. The caller must
// own the topic (no other factory may have it open). ErrNotFound if there
// is no such managed ledger.
func (f *Factory) Delete(ctx context.Context, name string) error {
	if err := checkName("managed ledger", name); err != nil {
		return err
	}
	f.mu.Lock()
	fut := f.ledgers[name]
	f.mu.Unlock()
	if fut != nil {
		select {
		case <-fut.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if fut.ml != nil {
			if err := fut.ml.Close(ctx); err != nil && !errors.Is(err, ErrFenced) {
				return err
			}
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
	for _, c := range curs {
		if err := f.md.Delete(ctx, cursorsParent(name)+"/"+c, metadata.AnyVersion); err != nil && !errors.Is(err, metadata.ErrNotFound) {
			return err
		}
	}
	for _, l := range rec.Ledgers {
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
	f.mu.Lock()
	f.closed = true
	futs := make([]*openFuture, 0, len(f.ledgers))
	for _, fut := range f.ledgers {
		futs = append(futs, fut)
	}
	f.mu.Unlock()
	var errs []error
	for _, fut := range futs {
		<-fut.done
		if fut.ml == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.defs.OperationTimeout)
		if err := fut.ml.Close(ctx); err != nil && !errors.Is(err, ErrFenced) {
			errs = append(errs, fmt.Errorf("%s: %w", fut.ml.name, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// crash stops every managed ledger's goroutines without closing ledgers or
// writing metadata, as if the process died (tests).
func (f *Factory) crash() {
	f.mu.Lock()
	f.closed = true
	futs := make([]*openFuture, 0, len(f.ledgers))
	for _, fut := range f.ledgers {
		futs = append(futs, fut)
	}
	f.mu.Unlock()
	for _, fut := range futs {
		<-fut.done
		if fut.ml != nil {
			fut.ml.crash()
		}
	}
}

func nowMillis() int64 { return time.Now().UnixMilli() }
