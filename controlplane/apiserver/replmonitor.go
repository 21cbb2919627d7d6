package apiserver

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/controlplane/store"
)

// The replication monitor: one goroutine of Serve that, every
// monitorInterval (and when a runbook starts),
//   - checks the health of every member of every replication group: a TCP
//     connection to the cluster's Pulsar URL within probeTimeout and, with
//     Config.Discovery, Consul's checks of its brokers (a cluster whose
//     brokers are all critical in a freshly read datacenter fails, see
//     discovery.go);
//   - completes the groups' create, update and delete operations once
//     their namespaces are applied in every member;
//   - runs each runbook operation not done in its own goroutine (after a
//     restart too: that is how runbooks resume);
//   - starts automatic failovers and failbacks (FailoverPolicy AUTOMATIC).
//
// Health and the agents' replication reports are kept in memory (replState):
// they are observations, refreshed every second, not desired state.

const (
	monitorInterval = 500 * time.Millisecond
	probeTimeout    = 500 * time.Millisecond
)

// replState is the monitor's memory. Its methods are safe for concurrent
// use.
type replState struct {
	mu      sync.Mutex
	reports map[string]clusterReport // by cluster resource name
	health  map[string]*health       // by cluster resource name
	running map[string]bool          // runbook operations being executed
	wake    chan struct{}            // capacity 1
}

type clusterReport struct {
	at time.Time
	ns map[string][]*cpv1.ReplicationBacklog // by "tenant/namespace"
}

type health struct {
	ok      bool
	since   time.Time // when ok last changed
	checked time.Time
	err     string
}

func newReplState() *replState {
	return &replState{reports: map[string]clusterReport{}, health: map[string]*health{},
		running: map[string]bool{}, wake: make(chan struct{}, 1)}
}

func (r *replState) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *replState) record(cluster string, nss []*cpv1.ReportReplicationStatusRequest_Namespace, at time.Time) {
	rep := clusterReport{at: at, ns: map[string][]*cpv1.ReplicationBacklog{}}
	for _, n := range nss {
		rep.ns[n.GetNamespace()] = n.GetBacklog()
	}
	r.mu.Lock()
	r.reports[cluster] = rep
	r.mu.Unlock()
}

// backlog sums from's backlog toward to ("" for every remote) over the
// namespaces, as last reported; ok is false without a report.
func (r *replState) backlog(from, to string, namespaces []string) (n int64, at time.Time, ok bool) {
	return r.sum(from, to, namespaces, (*cpv1.ReplicationBacklog).GetMessages)
}

// replicated sums the messages from's brokers have replicated to to
// ("" for every remote) over the namespaces, as last reported.
func (r *replState) replicated(from, to string, namespaces []string) (n int64, at time.Time, ok bool) {
	return r.sum(from, to, namespaces, (*cpv1.ReplicationBacklog).GetReplicatedMessages)
}

func (r *replState) sum(from, to string, namespaces []string, field func(*cpv1.ReplicationBacklog) int64) (n int64, at time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.reports[from]
	if !ok {
		return 0, time.Time{}, false
	}
	for _, ns := range namespaces {
		for _, b := range rep.ns[ns] {
			if to == "" || b.GetCluster() == to {
				n += field(b)
			}
		}
	}
	return n, rep.at, true
}

func (r *replState) healthy(cluster string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.health[cluster]
	return h != nil && h.ok && time.Since(h.checked) < 5*time.Second
}

func (r *replState) healthDetail(cluster string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.health[cluster]
	switch {
	case h == nil:
		return "not checked yet"
	case h.ok:
		return fmt.Sprintf("healthy for %s", time.Since(h.since).Round(time.Millisecond))
	default:
		return fmt.Sprintf("failing for %s: %s", time.Since(h.since).Round(time.Millisecond), h.err)
	}
}

// unhealthySince is when cluster started failing health checks (now when
// it passes them).
func (r *replState) unhealthySince(cluster string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.health[cluster]; h != nil && !h.ok {
		return h.since
	}
	return time.Now()
}

// stateFor returns whether cluster is healthy and for how long it has been
// in that state.
func (r *replState) stateFor(cluster string) (ok bool, d time.Duration, known bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.health[cluster]
	if h == nil {
		return false, 0, false
	}
	return h.ok, time.Since(h.since), true
}

func (r *replState) setHealth(cluster string, ok bool, err string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.health[cluster]
	if h == nil {
		h = &health{ok: ok, since: now}
		r.health[cluster] = h
	}
	if h.ok != ok {
		h.ok, h.since = ok, now
	}
	h.checked, h.err = now, err
}

// fillStatus adds the observations to rg's stored status.
func (r *replState) fillStatus(rg *cpv1.ReplicationGroup) {
	for _, m := range rg.Members {
		ms := memberStatus(rg, m)
		ms.Healthy = r.healthy(m)
		ms.Backlog = nil
		r.mu.Lock()
		rep, ok := r.reports[m]
		r.mu.Unlock()
		if !ok {
			continue
		}
		ms.ReportTime = timestamppb.New(rep.at)
		for _, peer := range rg.Members {
			if peer == m {
				continue
			}
			b := &cpv1.ReplicationBacklog{Cluster: peer}
			for _, ns := range rg.Namespaces {
				for _, x := range rep.ns[ns] {
					if x.GetCluster() == peer {
						b.Messages += x.GetMessages()
						b.DelaySeconds = max(b.DelaySeconds, x.GetDelaySeconds())
					}
				}
			}
			ms.Backlog = append(ms.Backlog, b)
		}
	}
}

// monitor runs until ctx ends.
func (s *Server) monitor(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(monitorInterval)
	defer t.Stop()
	for {
		s.monitorPass(ctx, &wg)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.repl.wake:
		}
	}
}

func (s *Server) monitorPass(ctx context.Context, wg *sync.WaitGroup) {
	var groups []*cpv1.ReplicationGroup
	token := ""
	for {
		objs, next, err := s.store.List(ctx, store.ListQuery{Kind: kindReplicationGroup.collection, PageSize: 1000, PageToken: token})
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("apiserver: replication monitor: list groups", "err", err)
			}
			return
		}
		for _, o := range objs {
			if m, _, err := decode(kindReplicationGroup, o); err == nil {
				groups = append(groups, m.(*cpv1.ReplicationGroup))
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	s.probeMembers(ctx, groups)
	// Runbooks, including evacuations (whose target is an organization).
	ops, _, err := s.store.List(ctx, store.ListQuery{Kind: kindOperation.collection, PageSize: 1000})
	if err == nil {
		for _, o := range ops {
			m, _, err := decode(kindOperation, o)
			if err != nil {
				continue
			}
			op := m.(*cpv1.Operation)
			if op.Done || op.Runbook == nil {
				continue
			}
			s.startRunbook(ctx, wg, op.Name)
		}
	}
	for _, rg := range groups {
		if err := s.superviseGroup(ctx, rg); err != nil && ctx.Err() == nil {
			s.log.Warn("apiserver: replication monitor", "group", rg.Name, "err", err)
		}
	}
}

func (s *Server) startRunbook(ctx context.Context, wg *sync.WaitGroup, name string) {
	s.repl.mu.Lock()
	if s.repl.running[name] {
		s.repl.mu.Unlock()
		return
	}
	s.repl.running[name] = true
	s.repl.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			s.repl.mu.Lock()
			delete(s.repl.running, name)
			s.repl.mu.Unlock()
		}()
		s.log.Info("apiserver: runbook running", "operation", name)
		s.runRunbook(ctx, name)
	}()
}

// probeMembers checks every member cluster's Pulsar URL, concurrently.
func (s *Server) probeMembers(ctx context.Context, groups []*cpv1.ReplicationGroup) {
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for _, rg := range groups {
		for _, m := range rg.Members {
			if seen[m] {
				continue
			}
			seen[m] = true
			cl, err := s.loadCluster(ctx, s.store, m)
			if err != nil {
				s.repl.setHealth(m, false, err.Error(), time.Now())
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := probe(ctx, cl.ServiceUrl)
				msg := ""
				if err != nil {
					msg = err.Error()
				} else if failing, why := s.consulVerdict(m); failing {
					// Consul's checks are the second input: the region
					// agent measured every broker failing.
					err, msg = fmt.Errorf("%s", why), why
				}
				s.repl.setHealth(m, err == nil, msg, time.Now())
			}()
		}
	}
	wg.Wait()
}

// probe opens and closes a TCP connection to a pulsar:// URL's host.
func probe(ctx context.Context, serviceURL string) error {
	if serviceURL == "" {
		return fmt.Errorf("no service URL")
	}
	u, err := url.Parse(serviceURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("bad service URL %q", serviceURL)
	}
	host := u.Host
	if i := strings.IndexByte(host, ','); i >= 0 {
		host = host[:i]
	}
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return err
	}
	return c.Close()
}

// superviseGroup completes rg's provisioning operation when its namespaces
// are applied, and starts automatic failovers.
func (s *Server) superviseGroup(ctx context.Context, rg *cpv1.ReplicationGroup) error {
	switch rg.State {
	case cpv1.ReplicationGroup_CREATING, cpv1.ReplicationGroup_UPDATING:
		ok, _, err := groupApplied(ctx, s.store, rg)
		if err != nil || !ok {
			return err
		}
		return s.tx(ctx, func(w store.Writer) error {
			cur, obj, err := s.loadGroup(ctx, w, rg.Name)
			if err != nil || cur.Operation != rg.Operation {
				return err
			}
			opName := cur.Operation
			cur.State, cur.Operation = cpv1.ReplicationGroup_READY, ""
			if err := saveGroup(ctx, w, obj, nil, cur, false); err != nil {
				return err
			}
			cur.Etag = ""
			return finishOperation(ctx, w, opName, cpv1.Operation_SUCCEEDED, codes.OK, "", cur)
		})
	case cpv1.ReplicationGroup_DELETING:
		released, err := s.groupReleased(ctx, rg)
		if err != nil || !released {
			return err
		}
		return s.tx(ctx, func(w store.Writer) error {
			cur, obj, err := s.loadGroup(ctx, w, rg.Name)
			if err != nil || cur.State != cpv1.ReplicationGroup_DELETING {
				return err
			}
			if err := w.Delete(ctx, kindReplicationGroup.collection, cur.Name, obj.Etag); err != nil {
				return err
			}
			return finishOperation(ctx, w, cur.Operation, cpv1.Operation_SUCCEEDED, codes.OK, "", nil)
		})
	case cpv1.ReplicationGroup_READY:
		return s.automaticFailover(ctx, rg)
	}
	return nil
}

// groupReleased reports whether every namespace the group managed is
// applied without it.
func (s *Server) groupReleased(ctx context.Context, rg *cpv1.ReplicationGroup) (bool, error) {
	for _, m := range rg.Members {
		for _, nsName := range rg.Namespaces {
			obj, err := s.store.Get(ctx, kindNamespace.collection, namespaceResource(m, nsName))
			if err != nil {
				continue // gone: nothing to wait for
			}
			nm, _, err := decode(kindNamespace, obj)
			if err != nil {
				return false, err
			}
			if nm.(*cpv1.Namespace).State != cpv1.PulsarResourceState_APPLIED {
				return false, nil
			}
		}
	}
	return true, nil
}

// automaticFailover fails over after the active cluster has failed health
// checks for failover_delay, and back to the primary once it has passed
// them for switch_back_delay.
func (s *Server) automaticFailover(ctx context.Context, rg *cpv1.ReplicationGroup) error {
	fp := rg.GetFailoverPolicy()
	if fp.GetMode() != cpv1.FailoverPolicy_AUTOMATIC || rg.Operation != "" {
		return nil
	}
	delay, back := defaultFailoverDelay, defaultSwitchBackDelay
	if fp.GetFailoverDelay() != nil {
		delay = fp.GetFailoverDelay().AsDuration()
	}
	if fp.GetSwitchBackDelay() != nil {
		back = fp.GetSwitchBackDelay().AsDuration()
	}
	home := rg.Primary
	if home == "" {
		home = rg.Members[0]
	}
	ok, d, known := s.repl.stateFor(rg.ActiveCluster)
	if known && !ok && d >= delay {
		to := s.nextMember(ctx, s.store, rg, rg.ActiveCluster, "")
		if to == "" {
			return nil
		}
		s.log.Warn("apiserver: automatic failover", "group", rg.Name, "from", rg.ActiveCluster, "to", to, "unhealthy_for", d.String())
		return s.tx(ctx, func(w store.Writer) error {
			_, err := s.startFailover(ctx, w, opFailover, rg.Name, to, false, runbookParams{}, "", false)
			return err
		})
	}
	if rg.ActiveCluster != home {
		hok, hd, hknown := s.repl.stateFor(home)
		if !hknown || !hok || hd < back {
			return nil
		}
		if why, _ := s.checkFailover(ctx, s.store, rg, rg.ActiveCluster, home, true, defaultMaxBacklog); why == "" {
			s.log.Info("apiserver: automatic failback", "group", rg.Name, "to", home, "healthy_for", hd.String())
			return s.tx(ctx, func(w store.Writer) error {
				_, err := s.startFailover(ctx, w, opFailback, rg.Name, home, true, runbookParams{}, "", false)
				return err
			})
		}
	}
	return nil
}
