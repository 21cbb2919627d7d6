package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// seqInfix separates the prefix from the sequence counters. It is not '/',
// so counters never show up in Children or Watch of user keys.
const seqInfix = "\x00seq/"

// Store is a metadata.Store on an etcd cluster. Create it with New; release
// it with Close.
type Store struct {
	cfg Config
	cli *clientv3.Client
	kvc pb.KVClient // cli's KV service, for transactions built by the store
	pfx string
	// alone, when set, reports whether the member this store calls is a
	// cluster of its own (the embedded store): then reads are served
	// from its state without a round of the consensus protocol
	// (serializable), which is as current as a linearizable read because a
	// lone member answers a write only after applying it. See reads.
	alone func() bool

	// ctx lives as long as the store; watches and session keepalives run
	// under it.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	sessions map[*session]struct{}
	batch    batching // writes waiting to be committed together (batch.go)

	wg sync.WaitGroup // watch goroutines and the batch committer
}

var _ metadata.Store = (*Store)(nil)

// New connects to the etcd cluster cfg names. It fails if no endpoint
// answers within cfg.DialTimeout or ctx.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Username:             cfg.Username,
		Password:             cfg.Password,
		TLS:                  cfg.TLS,
		Logger:               cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: connect %v: %w", cfg.Endpoints, err)
	}
	return newStore(ctx, cli, clientv3.RetryKVClient(cli), cfg)
}

// newStore wraps cli, which it closes on failure and on Close. It probes
// the cluster: clientv3.New does not wait for a connection, and a wrong
// endpoint should fail here rather than at first use.
func newStore(ctx context.Context, cli *clientv3.Client, kv pb.KVClient, cfg Config) (*Store, error) {
	s := &Store{cfg: cfg, cli: cli, kvc: kv, pfx: cfg.Prefix, sessions: make(map[*session]struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, s.pfx+seqInfix, clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		s.cancel()
		return nil, fmt.Errorf("etcdstore: connect %v: %w", cfg.Endpoints, err)
	}
	return s, nil
}

// Client returns the underlying etcd client (for tools and tests).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the key prefix of the store.
func (s *Store) Prefix() string { return s.pfx }

// Close ends the store's sessions (revoking their leases, which deletes
// their ephemeral keys), ends its watches and closes the client. It is
// idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sessions := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	// Concurrently: each revocation waits up to CloseTimeout for a store
	// that may be gone, and Close should take that long, not that long
	// per session.
	var wg sync.WaitGroup
	for _, sess := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = sess.end(true)
		}()
	}
	wg.Wait()
	s.cancel()
	s.wg.Wait()
	// A client without a connection of its own (the embedded in-process
	// one) reports its canceled context as Close's result.
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// check returns ErrClosed once the store is closed.
func (s *Store) check() error {
	if s.isClosed() {
		return metadata.ErrClosed
	}
	return nil
}

// mapErr translates a client error.
func (s *Store) mapErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case s.isClosed():
		return metadata.ErrClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %s: %w", metadata.ErrSessionLost, op, err)
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: %s: %w", metadata.ErrCompacted, op, err)
	}
	return fmt.Errorf("etcdstore: %s: %w", op, err)
}

func (s *Store) kv(kv *clientv3.GetResponse) metadata.KV {
	x := kv.Kvs[0]
	return metadata.KV{
		Key:       strings.TrimPrefix(string(x.Key), s.pfx),
		Value:     x.Value,
		Version:   metadata.Version(x.ModRevision),
		Ephemeral: x.Lease != 0,
	}
}

// Get implements metadata.Store.
func (s *Store) Get(ctx context.Context, key string) (metadata.KV, error) {
	if err := metadata.ValidateKey(key); err != nil {
		return metadata.KV{}, err
	}
	if err := s.check(); err != nil {
		return metadata.KV{}, err
	}
	resp, err := s.cli.Get(ctx, s.pfx+key, s.reads()...)
	if err != nil {
		return metadata.KV{}, s.mapErr("get "+key, err)
	}
	if len(resp.Kvs) == 0 {
		return metadata.KV{}, fmt.Errorf("%w: %s", metadata.ErrNotFound, key)
	}
	return s.kv(resp), nil
}

// Put implements metadata.Store. Putting an ephemeral key through the store
// (not its session) makes it persistent.
func (s *Store) Put(ctx context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	if err := metadata.ValidateKey(key); err != nil {
		return 0, err
	}
	return s.put(ctx, key, value, expected, clientv3.NoLease)
}

func (s *Store) put(ctx context.Context, key string, value []byte, expected metadata.Version, lease clientv3.LeaseID) (metadata.Version, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	k := s.pfx + key
	var cmps []*pb.Compare
	switch expected {
	case metadata.AnyVersion:
	case metadata.NotExists:
		cmps = []*pb.Compare{createRevIs0(k)}
	default:
		cmps = []*pb.Compare{modRevIs(k, int64(expected))}
	}
	var (
		ok  bool
		rev int64
	)
	if lease == clientv3.NoLease {
		w := newPut(ctx, k, value, cmps, nil)
		if err := s.submit(w); err != nil {
			return 0, s.mapErr("put "+key, err)
		}
		ok, rev = w.succeeded, w.rev
	} else {
		resp, err := s.txn(ctx, &pb.TxnRequest{Compare: cmps, Success: []*pb.RequestOp{putOp(k, value, int64(lease))}})
		if err != nil {
			return 0, s.mapErr("put "+key, err)
		}
		ok, rev = resp.Succeeded, resp.Header.Revision
	}
	if !ok {
		if expected == metadata.NotExists {
			return 0, fmt.Errorf("%w: %s", metadata.ErrExists, key)
		}
		return 0, fmt.Errorf("%w: %s, expected %d", metadata.ErrBadVersion, key, expected)
	}
	return metadata.Version(rev), nil
}

// Create implements metadata.Store.
func (s *Store) Create(ctx context.Context, key string, value []byte) (metadata.Version, error) {
	return s.Put(ctx, key, value, metadata.NotExists)
}

// CreateUnless implements metadata.Store: one transaction comparing the
// create revision of every key with 0. When it fails, the keys are read
// to name the one found (a read in the transaction's else branch would
// cost every creation two more operations; failures are rare).
func (s *Store) CreateUnless(ctx context.Context, key string, value []byte, absent ...string) (metadata.Version, error) {
	if err := metadata.ValidateKey(key); err != nil {
		return 0, err
	}
	cmps := make([]*pb.Compare, 1, 1+len(absent))
	cmps[0] = createRevIs0(s.pfx + key)
	var guards []string
	for _, k := range absent {
		if err := metadata.ValidateKey(k); err != nil {
			return 0, err
		}
		cmps = append(cmps, createRevIs0(s.pfx+k))
		guards = append(guards, s.pfx+k)
	}
	if err := s.check(); err != nil {
		return 0, err
	}
	w := newPut(ctx, s.pfx+key, value, cmps, guards)
	if err := s.submit(w); err != nil {
		return 0, s.mapErr("create "+key, err)
	}
	if w.succeeded {
		return metadata.Version(w.rev), nil
	}
	for _, k := range append([]string{key}, absent...) {
		resp, err := s.cli.Get(ctx, s.pfx+k, clientv3.WithCountOnly())
		if err == nil && resp.Count > 0 {
			return 0, fmt.Errorf("%w: %s", metadata.ErrExists, k)
		}
	}
	return 0, fmt.Errorf("%w: %s", metadata.ErrExists, key) // gone again meanwhile
}

// Delete implements metadata.Store.
func (s *Store) Delete(ctx context.Context, key string, expected metadata.Version) error {
	if err := metadata.ValidateKey(key); err != nil {
		return err
	}
	if err := s.check(); err != nil {
		return err
	}
	k := s.pfx + key
	if expected == metadata.AnyVersion {
		resp, err := s.cli.Delete(ctx, k)
		if err != nil {
			return s.mapErr("delete "+key, err)
		}
		if resp.Deleted == 0 {
			return fmt.Errorf("%w: %s", metadata.ErrNotFound, key)
		}
		return nil
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", int64(expected))).
		Then(clientv3.OpDelete(k)).
		Else(clientv3.OpGet(k, clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return s.mapErr("delete "+key, err)
	}
	if resp.Succeeded {
		// Only NotExists can match an absent key.
		if resp.Responses[0].GetResponseDeleteRange().Deleted == 0 {
			return fmt.Errorf("%w: %s", metadata.ErrNotFound, key)
		}
		return nil
	}
	if resp.Responses[0].GetResponseRange().Count == 0 {
		return fmt.Errorf("%w: %s", metadata.ErrNotFound, key)
	}
	return fmt.Errorf("%w: %s, expected %d", metadata.ErrBadVersion, key, expected)
}

// subtreeRange returns the etcd key range [start, end) of the strict
// descendants of parent.
func (s *Store) subtreeRange(parent string) (start, end string) {
	start = s.pfx + parent + "/"
	if parent == "/" {
		start = s.pfx + "/"
	}
	return start, clientv3.GetPrefixRangeEnd(start)
}

// Children implements metadata.Store. It pages through the subtree with
// keys-only range reads at one revision, and skips the rest of a child's
// subtree once a page ends inside it, so a child with many descendants
// costs one extra request rather than reading them all.
func (s *Store) Children(ctx context.Context, parent string) ([]string, error) {
	if err := metadata.ValidatePath(parent); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	from, end := s.subtreeRange(parent)
	var (
		names = make(map[string]struct{})
		rev   int64
	)
	for {
		opts := append([]clientv3.OpOption{
			clientv3.WithRange(end), clientv3.WithKeysOnly(),
			clientv3.WithLimit(int64(s.cfg.PageSize)),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend),
		}, s.reads()...)
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, from, opts...)
		if err != nil {
			return nil, s.mapErr("children "+parent, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		var last, lastChild string
		for _, kv := range resp.Kvs {
			last = strings.TrimPrefix(string(kv.Key), s.pfx)
			lastChild = metadata.ChildName(last, parent)
			names[lastChild] = struct{}{}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			// Equal names need not be adjacent in key order: "c.d" sorts
			// between "c" and "c/x".
			return slices.Sorted(maps.Keys(names)), nil
		}
		// Continue after the last key; if it lies below a child, every key
		// up to the end of that child's subtree names the same child.
		from = s.pfx + last + "\x00"
		if ck := ChildKey(parent, lastChild); ck != last {
			from = clientv3.GetPrefixRangeEnd(s.pfx + ck + "/")
		}
	}
}

// ChildKey returns the key of child name under parent.
func ChildKey(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// serializable is the read option of a store whose member is alone.
var serializable = []clientv3.OpOption{clientv3.WithSerializable()}

// reads returns the options of a read (Get, Children): serializable when
// the member is alone (see Store.alone), linearizable otherwise.
func (s *Store) reads() []clientv3.OpOption {
	if s.alone != nil && s.alone() {
		return serializable
	}
	return nil
}

// Revision implements metadata.Store.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	resp, err := s.cli.Get(ctx, s.pfx+seqInfix, clientv3.WithCountOnly())
	if err != nil {
		return 0, s.mapErr("revision", err)
	}
	return resp.Header.Revision, nil
}

// NextID implements metadata.Store with a counter key per sequence, advanced
// by a compare-and-swap transaction on its ModRevision.
func (s *Store) NextID(ctx context.Context, sequence string) (int64, error) {
	if err := metadata.ValidateName(sequence); err != nil {
		return 0, err
	}
	if err := s.check(); err != nil {
		return 0, err
	}
	k := s.pfx + seqInfix + sequence
	var (
		cur int64 // current value; 0 when the key is absent
		rev int64 // its ModRevision; 0 when absent
	)
	parse := func(r *clientv3.GetResponse) error {
		cur, rev = 0, 0
		if len(r.Kvs) == 0 {
			return nil
		}
		n, err := strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
		if err != nil {
			return fmt.Errorf("etcdstore: sequence %s holds %q: %w", sequence, r.Kvs[0].Value, err)
		}
		cur, rev = n, r.Kvs[0].ModRevision
		return nil
	}
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return 0, s.mapErr("next id "+sequence, err)
	}
	if err := parse(resp); err != nil {
		return 0, err
	}
	for {
		next := cur + 1
		tr, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, strconv.FormatInt(next, 10))).
			Else(clientv3.OpGet(k)).
			Commit()
		if err != nil {
			return 0, s.mapErr("next id "+sequence, err)
		}
		if tr.Succeeded {
			return next, nil
		}
		if err := parse((*clientv3.GetResponse)(tr.Responses[0].GetResponseRange())); err != nil {
			return 0, err
		}
	}
}

// register tracks an open session so Close can end it.
func (s *Store) register(sess *session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return metadata.ErrClosed
	}
	s.sessions[sess] = struct{}{}
	return nil
}

func (s *Store) unregister(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
}
