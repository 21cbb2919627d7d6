package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Metadata-store layout of the ledger client.
const (
	ledgersPath = "/ledgers/meta"    // /ledgers/meta/<id, 19 digits> -> LedgerMetadata JSON
	idBlockKey  = "/ledgers/idblock" // highest ledger id reserved by a client (decimal)
	ledgerIDSeq = "ledger-id"        // metadata.Store.NextID sequence of ledger ids before idBlockKey
	auditorPath = "/bookies/auditor" // auditor election
)

func ledgerKey(id int64) string { return fmt.Sprintf("%s/%019d", ledgersPath, id) }

// State is the lifecycle state of a ledger.
type State string

const (
	StateOpen       State = "OPEN"
	StateInRecovery State = "IN_RECOVERY"
	StateClosed     State = "CLOSED"
)

// Fragment is a run of entries stored on one ensemble: from FirstEntry up to
// the next fragment's FirstEntry (or the ledger's end).
type Fragment struct {
	FirstEntry int64    `json:"firstEntry"`
	Bookies    []string `json:"bookies"` // bookie addresses, index = ensemble position
}

// LedgerMetadata is the record of a ledger in the metadata store. It changes
// only by compare-and-set on its version.
type LedgerMetadata struct {
	ID          int64             `json:"id"`
	Ensemble    int               `json:"ensembleSize"`
	WriteQuorum int               `json:"writeQuorum"`
	AckQuorum   int               `json:"ackQuorum"`
	State       State             `json:"state"`
	LastEntry   int64             `json:"lastEntry"` // valid when CLOSED; -1: empty
	Length      int64             `json:"length"`    // payload bytes, valid when CLOSED
	Fragments   []Fragment        `json:"fragments"`
	CreatedAt   time.Time         `json:"createdAt"`
	Custom      map[string]string `json:"custom,omitempty"`

	version metadata.Version
}

// Version is the metadata-store version the record was read at.
func (m *LedgerMetadata) Version() metadata.Version { return m.version }

// fragmentFor returns the index of the fragment holding entryID.
func (m *LedgerMetadata) fragmentFor(entryID int64) int {
	i := len(m.Fragments) - 1
	for i > 0 && m.Fragments[i].FirstEntry > entryID {
		i--
	}
	return i
}

// fragmentEnd returns the last entry of fragment i given the ledger's last
// entry (for the last fragment).
func (m *LedgerMetadata) fragmentEnd(i int, last int64) int64 {
	if i+1 < len(m.Fragments) {
		return m.Fragments[i+1].FirstEntry - 1
	}
	return last
}

func (m *LedgerMetadata) clone() *LedgerMetadata {
	c := *m
	c.Fragments = make([]Fragment, len(m.Fragments))
	for i, f := range m.Fragments {
		c.Fragments[i] = Fragment{FirstEntry: f.FirstEntry, Bookies: append([]string(nil), f.Bookies...)}
	}
	return &c
}

// validateQuorum checks E >= Qw >= Qa >= 1.
func (m *LedgerMetadata) validateQuorum() error {
	if m.Ensemble < 1 || m.WriteQuorum < 1 || m.AckQuorum < 1 ||
		m.Ensemble < m.WriteQuorum || m.WriteQuorum < m.AckQuorum {
		return fmt.Errorf("%w: need E >= Qw >= Qa >= 1, got E=%d Qw=%d Qa=%d",
			ErrBadQuorum, m.Ensemble, m.WriteQuorum, m.AckQuorum)
	}
	return nil
}

// validate checks a complete record.
func (m *LedgerMetadata) validate() error {
	if err := m.validateQuorum(); err != nil {
		return err
	}
	if len(m.Fragments) == 0 {
		return errors.New("ledger metadata has no fragments")
	}
	for _, f := range m.Fragments {
		if len(f.Bookies) != m.Ensemble {
			return fmt.Errorf("fragment at %d has %d bookies, ensemble is %d", f.FirstEntry, len(f.Bookies), m.Ensemble)
		}
	}
	return nil
}

// metaStore reads and writes ledger metadata.
type metaStore struct{ md metadata.Store }

func (s metaStore) read(ctx context.Context, id int64) (*LedgerMetadata, error) {
	kv, err := s.md.Get(ctx, ledgerKey(id))
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrNoSuchLedger, id)
	}
	if err != nil {
		return nil, err
	}
	var m LedgerMetadata
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return nil, fmt.Errorf("ledger %d: corrupt metadata: %w", id, err)
	}
	m.version = kv.Version
	return &m, nil
}

func (s metaStore) create(ctx context.Context, m *LedgerMetadata) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	v, err := s.md.Create(ctx, ledgerKey(m.ID), b)
	if err != nil {
		return err
	}
	m.version = v
	return nil
}

// cas writes m if the stored version still equals m's; on success m carries
// the new version. A lost race returns metadata.ErrBadVersion.
func (s metaStore) cas(ctx context.Context, m *LedgerMetadata) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	v, err := s.md.Put(ctx, ledgerKey(m.ID), b, m.version)
	if err != nil {
		return err
	}
	m.version = v
	return nil
}

func (s metaStore) delete(ctx context.Context, id int64) error {
	err := s.md.Delete(ctx, ledgerKey(id), metadata.AnyVersion)
	if errors.Is(err, metadata.ErrNotFound) {
		return fmt.Errorf("%w: %d", ErrNoSuchLedger, id)
	}
	return err
}

// list returns the ids of all ledgers.
func (s metaStore) list(ctx context.Context) ([]int64, error) {
	names, err := s.md.Children(ctx, ledgersPath)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, 0, len(names))
	for _, n := range names {
		id, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			continue // not ours
		}
		ids = append(ids, id)
	}
	return ids, nil
}
