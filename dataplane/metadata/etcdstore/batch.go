package etcdstore

import (
	"cmp"
	"context"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Write batching (group commit).
//
// Concurrent writes of persistent keys (Put, Create, CreateUnless) reach
// etcd together: one transaction whose operations are the writes' own
// transactions (etcd nests them, each with its own comparisons, branches
// and result), so N concurrent topic creations cost one raft proposal, one
// WAL append and one fsync instead of N. Pulsar's metadata store batches
// its ZooKeeper operations the same way. On the embedded store, 64
// concurrent creators made 5.5-5.8k creations/s one transaction each and
// 19-22k/s in batches of up to 64.
//
// There is no timer: a write waits only while the batch before it is being
// committed, so a lone writer sees the latency of a plain transaction, and
// batches grow with the load.
//
// etcd evaluates every comparison of a transaction, nested ones too, before
// any of its writes. A batch is therefore committed only if that equals
// running its writes one after another in queue order: a write joins it
// only if no write before it in the queue writes a key the write compares
// (CreateUnless(b, absent a) after Create(a) must see a) or the key it
// writes (etcd also refuses a transaction writing a key twice), and no
// write left waiting before it compares the key it writes. Writes that
// cannot join wait for a later batch, in their order. All writes of a batch
// share its revision: each key's Version is still its own
// ModRevision, but a watch may see several keys change at one revision
// (metadata.Event).
//
// Writes bound to a lease (ephemeral keys) are not batched: a lease that
// expired would fail the whole transaction, and with it other callers'
// writes.

// Batch limits. etcd refuses transactions with more than --max-txn-ops
// operations at one level (default 128) and requests over
// --max-request-bytes (default 1.5 MiB); a batch the server refuses for
// either reason is committed in halves, and a refusal for its number of
// operations lowers the limit for later batches.
//
// One batch is in flight at a time. Two (one proposed while the other waits
// for its fsync) made 4.6-5.2k creations/s against 5.6-5.8k with one
// (BenchmarkTopicFootprint, alternating runs): the second mostly split the
// first.
const (
	maxBatchWrites = 64
	maxBatchBytes  = 256 << 10
)

// A write is one conditional write: if cmps hold, then runs. Its result is
// valid once done is closed.
type write struct {
	ctx    context.Context
	key    string   // the etcd key then puts
	guards []string // other etcd keys cmps compare
	size   int      // bytes of key and value, for maxBatchBytes
	cmps   []*pb.Compare
	then   []*pb.RequestOp
	done   chan struct{}

	succeeded bool
	rev       int64 // revision of the transaction that ran it
	err       error
}

// newPut is the write putting value at etcd key k if cmps hold; guards
// are the other keys cmps compare.
func newPut(ctx context.Context, k string, value []byte, cmps []*pb.Compare, guards []string) *write {
	return &write{ctx: ctx, key: k, guards: guards, size: len(k) + len(value),
		cmps: cmps, then: []*pb.RequestOp{putOp(k, value, 0)}}
}

// putOp is the operation putting value at etcd key k, bound to lease (0:
// none). It holds copies of both: a write whose caller stopped waiting may
// still be in a batch being sent, while the caller reuses value.
func putOp(k string, value []byte, lease int64) *pb.RequestOp {
	b := make([]byte, len(k)+len(value))
	copy(b, k)
	copy(b[len(k):], value)
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
		Key: b[:len(k):len(k)], Value: b[len(k):], Lease: lease}}}
}

// createRevIs0 compares etcd key k's create revision with 0: k is absent.
func createRevIs0(k string) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_CreateRevision{}}
}

// modRevIs compares etcd key k's modification revision with rev.
func modRevIs(k string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(k), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// batching is the Store's queue of writes, guarded by Store.mu.
type batching struct {
	queue      []*write
	committing bool         // a commitLoop goroutine runs
	maxWrites  int          // current limit (maxBatchWrites, lowered by refusals)
	commits    atomic.Int64 // transactions sent, for tests
}

// submit queues w and waits for its result or for w.ctx to end. A write
// whose context ends while it is in flight may still be applied, as with
// any etcd request the caller stopped waiting for.
func (s *Store) submit(w *write) error {
	w.done = make(chan struct{})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return metadata.ErrClosed
	}
	s.batch.queue = append(s.batch.queue, w)
	if !s.batch.committing {
		s.batch.committing = true
		s.wg.Add(1)
		go s.commitLoop()
	}
	s.mu.Unlock()
	select {
	case <-w.done:
		return w.err
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// commitLoop commits batches until the queue is empty.
func (s *Store) commitLoop() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		batch := s.takeBatchLocked()
		if len(batch) == 0 {
			s.batch.committing = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.commit(batch)
	}
}

// takeBatchLocked removes the next batch from the queue: writes in queue
// order within the limits, leaving for a later batch each write that must
// see or precede a write before it (see the top of this file). Writes
// whose context has ended are finished without being sent; on a closed
// store every write fails.
func (s *Store) takeBatchLocked() []*write {
	q := &s.batch
	if q.maxWrites == 0 {
		q.maxWrites = maxBatchWrites
	}
	var (
		batch []*write
		puts  = make(map[string]struct{}) // keys written by the writes looked at
		held  = make(map[string]struct{}) // keys compared by writes left waiting
		bytes int
		rest  = q.queue[:0]
	)
	for _, w := range q.queue {
		if s.closed || w.ctx.Err() != nil {
			w.finish(cmp.Or(w.ctx.Err(), metadata.ErrClosed))
			continue
		}
		ok := len(batch) < q.maxWrites && (len(batch) == 0 || bytes+w.size <= maxBatchBytes)
		if _, in := puts[w.key]; in {
			ok = false
		} else if _, in := held[w.key]; in {
			ok = false
		}
		for _, g := range w.guards {
			if _, in := puts[g]; in {
				ok = false
			}
		}
		puts[w.key] = struct{}{}
		if !ok {
			for _, g := range w.guards {
				held[g] = struct{}{}
			}
			rest = append(rest, w)
			continue
		}
		bytes += w.size
		batch = append(batch, w)
	}
	clear(q.queue[len(rest):])
	q.queue = rest
	return batch
}

func (w *write) finish(err error) {
	w.err = err
	close(w.done)
}

// commit sends batch as one transaction (a lone write as itself) and
// finishes its writes.
func (s *Store) commit(batch []*write) {
	ctx, cancel := s.batchContext(batch)
	defer cancel()
	s.batch.commits.Add(1)
	if len(batch) == 1 {
		w := batch[0]
		resp, err := s.txn(ctx, &pb.TxnRequest{Compare: w.cmps, Success: w.then})
		if err == nil {
			w.succeeded, w.rev = resp.Succeeded, resp.Header.Revision
		}
		w.finish(err)
		return
	}
	ops := make([]*pb.RequestOp, len(batch))
	txns := make([]pb.RequestOp_RequestTxn, len(batch))
	reqs := make([]pb.TxnRequest, len(batch))
	for i, w := range batch {
		reqs[i] = pb.TxnRequest{Compare: w.cmps, Success: w.then}
		txns[i].RequestTxn = &reqs[i]
		ops[i] = &pb.RequestOp{Request: &txns[i]}
	}
	resp, err := s.txn(ctx, &pb.TxnRequest{Success: ops})
	if err != nil && refusedForSize(err) {
		// Too big for this server: commit the halves (down to single
		// writes), and send smaller batches from now on when the number
		// of operations was the problem.
		half := len(batch) / 2
		if rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCTooManyOps) {
			s.mu.Lock()
			s.batch.maxWrites = max(1, min(s.batch.maxWrites, half))
			s.mu.Unlock()
		}
		s.commit(batch[:half])
		s.commit(batch[half:])
		return
	}
	for i, w := range batch {
		if err == nil {
			w.succeeded, w.rev = resp.Responses[i].GetResponseTxn().Succeeded, resp.Header.Revision
		}
		w.finish(err)
	}
}

// txn sends req through the store's KV client. Over gRPC it waits for a
// connection that is down to come back, within ctx, as clientv3's own calls
// do (its default call options), instead of failing at once.
func (s *Store) txn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	resp, err := s.kvc.Txn(ctx, req, grpc.WaitForReady(true))
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return resp, nil
}

// refusedForSize reports whether etcd refused a transaction for its number
// of operations or its bytes.
func refusedForSize(err error) bool {
	switch rpctypes.ErrorDesc(err) {
	case rpctypes.ErrorDesc(rpctypes.ErrGRPCTooManyOps), rpctypes.ErrorDesc(rpctypes.ErrGRPCRequestTooLarge):
		return true
	}
	return false
}

// batchContext is the context a batch is committed under: it ends with the
// store, or once every write's own context has ended (nobody waits any
// more).
func (s *Store) batchContext(batch []*write) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.ctx)
	waiting := atomic.Int64{}
	waiting.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, w := range batch {
		stops[i] = context.AfterFunc(w.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
