package ledger

// Side ledgers: bookie ledgers a managed ledger's owner writes besides the
// topic's own list (the broker's compacted ledger of a topic). They are not
// in the managed-ledger record and are never trimmed or offloaded; the
// owner names them in a durable cursor's properties, under keys starting
// with SideLedgerProp, so that DeleteCursor and Factory.Delete delete them
// with the cursor (a side ledger named by no cursor is the owner's to
// delete).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/client"
)

// SideLedgerProp prefixes the cursor properties whose values are ids of
// side ledgers owned by the cursor.
const SideLedgerProp = "sideLedger."

// SideWriter writes one side ledger. Appends are pipelined; Close waits
// for them. Not safe for concurrent Appends.
type SideWriter struct {
	wh *client.WriteHandle

	mu      sync.Mutex
	err     error
	entries int64
	size    int64
}

// CreateSideLedger creates a side ledger with the managed ledger's current
// replication settings; purpose is recorded in its metadata.
func (ml *ManagedLedger) CreateSideLedger(ctx context.Context, purpose string) (*SideWriter, error) {
	ml.mu.Lock()
	e, qw, qa := ml.conf().Ensemble, ml.conf().WriteQuorum, ml.conf().AckQuorum
	ml.mu.Unlock()
	wh, err := ml.f.client.CreateLedger(ctx, client.CreateOptions{
		Ensemble: e, WriteQuorum: qw, AckQuorum: qa,
		Custom: map[string]string{"managedLedger": ml.name, "component": purpose},
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: create side ledger for %q: %w", ml.name, err)
	}
	return &SideWriter{wh: wh}, nil
}

// ID returns the side ledger's id.
func (w *SideWriter) ID() int64 { return w.wh.ID() }

// Append adds data as the next entry without waiting; a failure is
// reported by Close. The writer keeps data until it is stored.
func (w *SideWriter) Append(data []byte) {
	w.mu.Lock()
	w.entries++
	w.size += int64(len(data))
	w.mu.Unlock()
	w.wh.AppendAsync(data, func(_ int64, err error) {
		if err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = err
			}
			w.mu.Unlock()
		}
	})
}

// Close waits for every append and closes the ledger; it returns the
// first append or close failure. Entries and Size are then final.
func (w *SideWriter) Close(ctx context.Context) error {
	cerr := w.wh.Close(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return fmt.Errorf("ledger: side ledger %d: %w", w.wh.ID(), w.err)
	}
	if cerr != nil {
		return fmt.Errorf("ledger: close side ledger %d: %w", w.wh.ID(), cerr)
	}
	if lac := w.wh.LastAddConfirmed(); lac+1 != w.entries {
		return fmt.Errorf("ledger: side ledger %d closed at entry %d of %d", w.wh.ID(), lac, w.entries)
	}
	return nil
}

// Entries returns the number of entries appended.
func (w *SideWriter) Entries() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.entries
}

// Size returns the bytes appended.
func (w *SideWriter) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size
}

// SideReader reads a closed side ledger.
type SideReader struct {
	rh *client.ReadHandle
}

// OpenSideLedger opens a side ledger for reading (recovering it if its
// writer did not close it).
func (ml *ManagedLedger) OpenSideLedger(ctx context.Context, id int64) (*SideReader, error) {
	rh, err := ml.f.client.OpenLedger(ctx, id, true)
	if err != nil {
		return nil, fmt.Errorf("ledger: open side ledger %d of %q: %w", id, ml.name, err)
	}
	return &SideReader{rh: rh}, nil
}

// Entries returns the side ledger's number of entries.
func (r *SideReader) Entries() int64 { return r.rh.LastAddConfirmed() + 1 }

// Size returns the side ledger's length in bytes, as its metadata records
// it.
func (r *SideReader) Size() int64 { return r.rh.Metadata().Length }

// Read returns entries first..last (inclusive) of the side ledger.
func (r *SideReader) Read(ctx context.Context, first, last int64) ([][]byte, error) {
	ents, err := r.rh.Read(ctx, first, last)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(ents))
	for i, e := range ents {
		out[i] = e.Payload
	}
	return out, nil
}

// DeleteSideLedger deletes a side ledger; one already gone is not an
// error.
func (ml *ManagedLedger) DeleteSideLedger(ctx context.Context, id int64) error {
	return deleteSideLedger(ctx, ml.f.client, id)
}

func deleteSideLedger(ctx context.Context, c *client.Client, id int64) error {
	if err := c.DeleteLedger(ctx, id); err != nil && !errors.Is(err, client.ErrNoSuchLedger) {
		return fmt.Errorf("ledger: delete side ledger %d: %w", id, err)
	}
	return nil
}

// sideLedgers returns the side-ledger ids named in cursor properties.
func sideLedgers(props map[string]string) []int64 {
	var ids []int64
	for k, v := range props {
		if !strings.HasPrefix(k, SideLedgerProp) {
			continue
		}
		if id, err := strconv.ParseInt(v, 10, 64); err == nil && id >= 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// MarkDeleteWithProperties moves the mark-delete position forward to p (as
// AckCumulative, p need not be stored any more) and replaces the
// properties given (an empty value deletes the key) in one change, then
// stores the cursor: a crash finds both or neither.
func (c *Cursor) MarkDeleteWithProperties(ctx context.Context, p Position, props map[string]string) error {
	c.mu.Lock()
	if err := c.errLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	next := maps.Clone(c.props)
	if next == nil {
		next = map[string]string{}
	}
	for k, v := range props {
		if v == "" {
			delete(next, k)
		} else {
			next[k] = v
		}
	}
	c.props = next
	c.ackCumulativeLocked(p)
	c.changedLocked()
	c.mu.Unlock()
	return c.Flush(ctx)
}
