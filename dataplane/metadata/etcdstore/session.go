package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// session is a lease kept alive by a concurrency.Session.
type session struct {
	s   *Store
	cs  *concurrency.Session
	ttl time.Duration

	mu     sync.Mutex
	ended  bool
	leads  map[*leadership]struct{}
	endErr error
}

var _ metadata.Session = (*session)(nil)

// NewSession implements metadata.Store. The TTL is rounded up to whole
// seconds (etcd also enforces a floor of about 1.5 election timeouts).
func (s *Store) NewSession(ctx context.Context, ttl time.Duration) (metadata.Session, error) {
	if ttl <= 0 {
		ttl = metadata.DefaultSessionTTL
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	secs := int(math.Ceil(ttl.Seconds()))
	grant, err := s.cli.Grant(ctx, int64(secs))
	if err != nil {
		return nil, s.mapErr("grant lease", err)
	}
	cs, err := concurrency.NewSession(s.cli, concurrency.WithLease(grant.ID),
		concurrency.WithTTL(secs), concurrency.WithContext(s.ctx))
	if err != nil {
		_, _ = s.cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return nil, s.mapErr("keep lease alive", err)
	}
	sess := &session{s: s, cs: cs, ttl: time.Duration(secs) * time.Second, leads: make(map[*leadership]struct{})}
	if err := s.register(sess); err != nil {
		cs.Orphan()
		_, _ = s.cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return nil, err
	}
	return sess, nil
}

func (sess *session) ID() int64             { return int64(sess.cs.Lease()) }
func (sess *session) Done() <-chan struct{} { return sess.cs.Done() }

func (sess *session) lostErr() error {
	return fmt.Errorf("%w: lease %x", metadata.ErrSessionLost, int64(sess.cs.Lease()))
}

// check fails when the store is closed or the session is lost.
func (sess *session) check() error {
	if err := sess.s.check(); err != nil {
		return err
	}
	select {
	case <-sess.cs.Done():
		return sess.lostErr()
	default:
		return nil
	}
}

// Close implements metadata.Session: it stops the keepalive and revokes the
// lease, which deletes the ephemeral keys.
func (sess *session) Close() error { return sess.end(true) }

// end stops the keepalive, ends the leaderships and, if revoke, revokes the
// lease. It runs once; later calls return the first result.
func (sess *session) end(revoke bool) error {
	sess.mu.Lock()
	if sess.ended {
		sess.mu.Unlock()
		return sess.endErr
	}
	sess.ended = true
	leads := make([]*leadership, 0, len(sess.leads))
	for l := range sess.leads {
		leads = append(leads, l)
	}
	sess.mu.Unlock()

	sess.cs.Orphan()
	for _, l := range leads {
		l.stop()
	}
	var err error
	if revoke {
		ctx, cancel := context.WithTimeout(context.Background(), min(sess.ttl, sess.s.cfg.CloseTimeout))
		_, err = sess.s.cli.Revoke(ctx, sess.cs.Lease())
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			err = fmt.Errorf("etcdstore: revoke lease %x: %w", int64(sess.cs.Lease()), err)
		} else {
			err = nil
		}
	}
	sess.s.unregister(sess)
	sess.mu.Lock()
	sess.endErr = err
	sess.mu.Unlock()
	return err
}

// CreateEphemeral implements metadata.Session.
func (sess *session) CreateEphemeral(ctx context.Context, key string, value []byte) (metadata.Version, error) {
	return sess.PutEphemeral(ctx, key, value, metadata.NotExists)
}

// PutEphemeral implements metadata.Session. The key must be absent or bound
// to this session's lease: a persistent key or one of another session fails
// with ErrBadVersion (ErrExists for NotExists).
func (sess *session) PutEphemeral(ctx context.Context, key string, value []byte, expected metadata.Version) (metadata.Version, error) {
	if err := metadata.ValidateKey(key); err != nil {
		return 0, err
	}
	if err := sess.check(); err != nil {
		return 0, err
	}
	s, lease := sess.s, sess.cs.Lease()
	k := s.pfx + key
	put := clientv3.OpPut(k, string(value), clientv3.WithLease(lease))
	mine := clientv3.Compare(clientv3.LeaseValue(k), "=", lease)
	if expected == metadata.NotExists {
		v, err := s.put(ctx, key, value, expected, lease)
		return v, sess.mapErr(err)
	}
	for {
		cmps := []clientv3.Cmp{mine}
		if expected != metadata.AnyVersion {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", int64(expected)))
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(put).Else(clientv3.OpGet(k, clientv3.WithCountOnly())).Commit()
		if err != nil {
			return 0, sess.mapErr(s.mapErr("put ephemeral "+key, err))
		}
		if resp.Succeeded {
			return metadata.Version(resp.Header.Revision), nil
		}
		absent := resp.Responses[0].GetResponseRange().Count == 0
		if !absent || expected != metadata.AnyVersion {
			return 0, fmt.Errorf("%w: %s is absent, at another version or not owned by lease %x", metadata.ErrBadVersion, key, int64(lease))
		}
		// AnyVersion on an absent key: create it, unless someone else just did.
		v, err := s.put(ctx, key, value, metadata.NotExists, lease)
		if err == nil || !errors.Is(err, metadata.ErrExists) {
			return v, sess.mapErr(err)
		}
	}
}

// mapErr reports ErrSessionLost for failures caused by a lost lease.
func (sess *session) mapErr(err error) error {
	if err == nil || errors.Is(err, metadata.ErrSessionLost) || errors.Is(err, metadata.ErrClosed) {
		return err
	}
	select {
	case <-sess.cs.Done():
		return fmt.Errorf("%w: %w", metadata.ErrSessionLost, err)
	default:
		return err
	}
}

// Leader implements metadata.Session.
func (sess *session) Leader(ctx context.Context, election string) (metadata.KV, error) {
	if err := metadata.ValidateKey(election); err != nil {
		return metadata.KV{}, err
	}
	if err := sess.s.check(); err != nil {
		return metadata.KV{}, err
	}
	resp, err := concurrency.NewElection(sess.cs, sess.s.pfx+election).Leader(ctx)
	if errors.Is(err, concurrency.ErrElectionNoLeader) {
		return metadata.KV{}, fmt.Errorf("%w: no leader of %s", metadata.ErrNotFound, election)
	}
	if err != nil {
		return metadata.KV{}, sess.s.mapErr("leader of "+election, err)
	}
	return sess.s.kv(resp), nil
}

// Elect implements metadata.Session with a concurrency.Election: the
// candidate key is election/<lease id in hex>, and candidates lead in the
// order their keys were created.
func (sess *session) Elect(ctx context.Context, election string, value []byte) (metadata.Leadership, error) {
	if err := metadata.ValidateKey(election); err != nil {
		return nil, err
	}
	if err := sess.check(); err != nil {
		return nil, err
	}
	s := sess.s
	// Stop campaigning when the session is lost or the store closes.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(sess.cs.Ctx(), cancel)
	defer stop()
	e := concurrency.NewElection(sess.cs, s.pfx+election)
	// A canceled Campaign resigns with the client's own context, which
	// blocks for as long as etcd is unreachable: run it aside and answer the
	// caller's cancellation at once. The campaign goroutine ends when that
	// resign completes or the client closes; if it won meanwhile it resigns.
	campaign := make(chan error, 1)
	go func() { campaign <- e.Campaign(cctx, string(value)) }()
	var err error
	select {
	case err = <-campaign:
	case <-cctx.Done():
		go func() {
			if <-campaign == nil {
				rctx, c := context.WithTimeout(sess.cs.Ctx(), 5*time.Second)
				_ = e.Resign(rctx)
				c()
			}
		}()
		err = cctx.Err()
	}
	if err != nil {
		if cerr := sess.check(); cerr != nil {
			return nil, cerr
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, sess.mapErr(s.mapErr("campaign "+election, err))
	}
	// Campaign returns once every older candidate is gone; make sure ours
	// is still there (the lease may have expired meanwhile).
	resp, err := s.cli.Get(ctx, e.Key())
	if err != nil {
		return nil, sess.mapErr(s.mapErr("campaign "+election, err))
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev() {
		if cerr := sess.check(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("%w: candidate key %s was deleted", metadata.ErrNotFound, strings.TrimPrefix(e.Key(), s.pfx))
	}
	kv := resp.Kvs[0]
	l := &leadership{
		sess:      sess,
		key:       strings.TrimPrefix(e.Key(), s.pfx),
		createRev: kv.CreateRevision,
		version:   metadata.Version(kv.ModRevision),
		lost:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancel(sess.cs.Ctx())
	sess.mu.Lock()
	if sess.ended {
		sess.mu.Unlock()
		l.cancel()
		return nil, sess.lostErr()
	}
	sess.leads[l] = struct{}{}
	sess.mu.Unlock()
	go l.monitor(resp.Header.Revision + 1)
	return l, nil
}

// leadership watches its candidate key and closes lost when the key is
// deleted, the session ends or it resigns. Its goroutine is owned by the
// session, which stops it in end.
type leadership struct {
	sess      *session
	key       string
	createRev int64
	version   metadata.Version
	ctx       context.Context
	cancel    context.CancelFunc
	lost      chan struct{} // closed by monitor when it returns
	done      chan struct{}
}

var _ metadata.Leadership = (*leadership)(nil)

func (l *leadership) Key() string               { return l.key }
func (l *leadership) Version() metadata.Version { return l.version }
func (l *leadership) Lost() <-chan struct{}     { return l.lost }

// stop ends the monitor and waits for it.
func (l *leadership) stop() {
	l.cancel()
	<-l.done
}

// Resign implements metadata.Leadership: it deletes the candidate key if it
// is still the one this leadership created.
func (l *leadership) Resign(ctx context.Context) error {
	s := l.sess.s
	defer func() {
		l.stop()
		l.sess.mu.Lock()
		delete(l.sess.leads, l)
		l.sess.mu.Unlock()
	}()
	select {
	case <-l.lost:
		return nil
	default:
	}
	k := s.pfx + l.key
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", l.createRev)).
		Then(clientv3.OpDelete(k)).
		Commit()
	if err != nil {
		return s.mapErr("resign "+l.key, err)
	}
	return nil
}

func (l *leadership) monitor(from int64) {
	defer close(l.done)
	defer close(l.lost)
	defer l.cancel()
	s := l.sess.s
	k := s.pfx + l.key
	for {
		wch := s.cli.Watch(l.ctx, k, clientv3.WithRev(from))
		for resp := range wch {
			if resp.CompactRevision != 0 || resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					return
				}
			}
			from = resp.Header.Revision + 1
		}
		if l.ctx.Err() != nil {
			return
		}
		// The watch broke: look at the key itself, then watch again.
		resp, err := s.cli.Get(l.ctx, k)
		if err == nil {
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.createRev {
				return
			}
			from = resp.Header.Revision + 1
		}
		select {
		case <-time.After(rewatchBackoff):
		case <-l.ctx.Done():
			return
		}
	}
}
