package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// AvailablePrefix is the metadata prefix of bookie registrations:
// /bookies/available/<bookieID>, an ephemeral key holding a Registration.
const AvailablePrefix = "/bookies/available"

// Registration is the JSON value of a bookie's availability key. Ledger
// clients pick ensembles among the registered bookies that are not
// read-only.
type Registration struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Rack     string `json:"rack,omitempty"`
	Region   string `json:"region,omitempty"`
	ReadOnly bool   `json:"readOnly"`
	// Instance is the bookie's cookie instance id. A registration left by
	// an earlier incarnation of the same disk (the process was killed and
	// its session has not expired yet) carries the same instance, so a
	// restarted bookie can replace it at once instead of waiting out the
	// session TTL. Two live processes cannot share one disk: the storage
	// holds an exclusive lock on it.
	Instance string `json:"instance,omitempty"`
}

// AvailableKey returns the registration key of a bookie.
func AvailableKey(bookieID string) string { return AvailablePrefix + "/" + bookieID }

// ListAvailable returns the registered bookies sorted by id, read-only ones
// included (check ReadOnly). A registration that vanishes while listing is
// skipped.
func ListAvailable(ctx context.Context, md metadata.Store) ([]Registration, error) {
	names, err := md.Children(ctx, AvailablePrefix)
	if err != nil {
		return nil, fmt.Errorf("bookie: list available bookies: %w", err)
	}
	regs := make([]Registration, 0, len(names))
	for _, name := range names {
		kv, err := md.Get(ctx, AvailableKey(name))
		if errors.Is(err, metadata.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("bookie: read registration of %s: %w", name, err)
		}
		var r Registration
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("bookie: registration of %s is not valid JSON: %w", name, err)
		}
		regs = append(regs, r)
	}
	sort.Slice(regs, func(i, j int) bool { return regs[i].ID < regs[j].ID })
	return regs, nil
}

// registrar keeps the bookie's availability key alive: it re-registers with
// a new session when the session is lost and republishes the read-only
// state when the storage changes it. It runs on one goroutine owned by the
// Server and stops (closing its session, which deletes the key) when the
// server stops.
type registrar struct {
	s    *Server
	sess metadata.Session
	reg  Registration
}

// newRegistrar registers the bookie once, synchronously.
func (s *Server) newRegistrar(ctx context.Context) (*registrar, error) {
	r := &registrar{s: s, reg: Registration{
		ID:       s.cfg.ID,
		Addr:     s.cfg.AdvertisedAddr,
		Rack:     s.cfg.Rack,
		Region:   s.cfg.Region,
		ReadOnly: s.st.ReadOnly() != nil,
		Instance: s.instance,
	}}
	if err := r.register(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// register opens a session and creates the availability key.
func (r *registrar) register(ctx context.Context) error {
	sess, err := r.s.md.NewSession(ctx, r.s.cfg.SessionTTL)
	if err != nil {
		return fmt.Errorf("bookie: open metadata session: %w", err)
	}
	b, err := json.Marshal(r.reg)
	if err != nil {
		sess.Close()
		return err
	}
	_, err = sess.CreateEphemeral(ctx, AvailableKey(r.reg.ID), b)
	if errors.Is(err, metadata.ErrExists) && r.removeStale(ctx) {
		_, err = sess.CreateEphemeral(ctx, AvailableKey(r.reg.ID), b)
	}
	if err != nil {
		sess.Close()
		if errors.Is(err, metadata.ErrExists) {
			return fmt.Errorf("bookie: %q is already registered as available (another process, or a lost session not yet expired): %w",
				r.reg.ID, err)
		}
		return fmt.Errorf("bookie: register %s: %w", r.reg.ID, err)
	}
	r.sess = sess
	r.s.sessionID.Store(sess.ID())
	r.s.log.Info("bookie registered", slog.String("id", r.reg.ID), slog.String("addr", r.reg.Addr),
		slog.Bool("read_only", r.reg.ReadOnly), slog.Int64("session", sess.ID()))
	return nil
}

// removeStale deletes an existing registration of this bookie id if it was
// left by an earlier incarnation of this very disk (same cookie instance),
// and reports whether it did.
func (r *registrar) removeStale(ctx context.Context) bool {
	if r.reg.Instance == "" {
		return false
	}
	kv, err := r.s.md.Get(ctx, AvailableKey(r.reg.ID))
	if err != nil {
		return false
	}
	var old Registration
	if json.Unmarshal(kv.Value, &old) != nil || old.Instance != r.reg.Instance {
		return false
	}
	if err := r.s.md.Delete(ctx, AvailableKey(r.reg.ID), kv.Version); err != nil {
		return false
	}
	r.s.log.Info("bookie replaced a registration left by its previous incarnation", slog.String("id", r.reg.ID))
	return true
}

func (r *registrar) run() {
	ctx := r.s.stopCtx // canceled by Shutdown
	t := time.NewTicker(r.s.cfg.ReadOnlyPollPeriod)
	defer t.Stop()
	for {
		select {
		case <-r.s.stopping:
			if r.sess != nil {
				if err := r.sess.Close(); err != nil {
					r.s.log.Warn("bookie session close failed", slog.Any("err", err))
				}
			}
			return
		case <-r.sessDone():
			r.s.log.Warn("bookie metadata session lost; re-registering", slog.String("id", r.reg.ID))
			r.sess = nil
			r.reregister(ctx)
		case <-t.C:
			ro := r.s.st.ReadOnly()
			if (ro != nil) == r.reg.ReadOnly || r.sess == nil {
				continue
			}
			r.reg.ReadOnly = ro != nil
			b, _ := json.Marshal(r.reg)
			if _, err := r.sess.PutEphemeral(ctx, AvailableKey(r.reg.ID), b, metadata.AnyVersion); err != nil {
				// Retried on the next tick.
				r.reg.ReadOnly = !r.reg.ReadOnly
				r.s.log.Warn("bookie registration update failed", slog.Any("err", err))
				continue
			}
			r.s.log.Info("bookie registration updated", slog.Bool("read_only", r.reg.ReadOnly), slog.Any("reason", ro))
		}
	}
}

// sessDone returns the current session's Done channel (nil, blocking
// forever, when there is none).
func (r *registrar) sessDone() <-chan struct{} {
	if r.sess == nil {
		return nil
	}
	return r.sess.Done()
}

// reregister retries registration with backoff until it succeeds or the
// server stops. The old key may survive until its lease expires (the store
// saw the session alive longer than the client did): creation then fails
// with ErrExists and is retried.
func (r *registrar) reregister(ctx context.Context) {
	backoff := DefaultRegistrationBackoff
	for {
		r.reg.ReadOnly = r.s.st.ReadOnly() != nil
		err := r.register(ctx)
		if err == nil {
			return
		}
		r.s.log.Warn("bookie re-registration failed", slog.Any("err", err), slog.Duration("retry_in", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-r.s.stopping:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, max(r.s.cfg.SessionTTL/2, DefaultRegistrationBackoff))
	}
}
