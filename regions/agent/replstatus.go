package agent

// Replication groups in the data plane. The control plane writes a group's
// fences into the Namespace resources of its members (fenced_to); the agent
// applies a namespace's fence with Pulsar's namespace migration call right
// after the namespace itself, so it is part of the namespace being APPLIED.
// The agent also reports, every replReportInterval, the replication backlog
// of every replicated namespace of its clusters, read from the brokers'
// pulsar_replication_* metrics; the runbooks' drain checks and the groups'
// status read those reports.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/regions/pulsaradmin"
)

const replReportInterval = 500 * time.Millisecond

// applyFence sets the migration state of a namespace managed by a
// replication group: fenced toward fenced_to, or open. Namespaces outside
// groups are left alone. It returns the call made, for the log.
func (a *Agent) applyFence(ctx context.Context, c *pulsaradmin.Client, ch *cpv1.PulsarResourceChange) (string, error) {
	ns := ch.GetNamespace()
	if ns == nil || ch.GetDeleted() || ns.GetReplicationGroup() == "" {
		return "", nil
	}
	segs := strings.Split(ns.GetName(), "/")
	if len(segs) != 8 {
		return "", fmt.Errorf("%q is not a namespace name", ns.GetName())
	}
	name := segs[5] + "/" + segs[7]
	var target *pulsaradmin.ClusterURL
	if to := ns.GetFencedTo(); to != "" {
		p := a.peer(to)
		if p == nil || p.GetServiceUrl() == "" {
			return "", fmt.Errorf("fence toward %s: its URLs are not known yet", to)
		}
		// The TLS URLs too (empty without TLS): a client on pulsar+ssl://
		// follows TopicMigrated only to the target's TLS URL.
		target = &pulsaradmin.ClusterURL{ServiceURL: p.GetAdminUrl(), ServiceURLTLS: p.GetTlsAdminUrl(),
			BrokerServiceURL: p.GetServiceUrl(), BrokerServiceURLTLS: p.GetTlsServiceUrl(), Cluster: a.pulsarName(to)}
	}
	if err := c.SetNamespaceMigration(ctx, name, target); err != nil {
		return "", fmt.Errorf("fence %s: %w", name, err)
	}
	if target != nil {
		return "fence " + name + " toward " + ns.GetFencedTo(), nil
	}
	return "", nil
}

// replicationLoop reports the clusters' replication until ctx ends.
func (a *Agent) replicationLoop(ctx context.Context) {
	hc := &http.Client{Transport: a.adminTransport, Timeout: 2 * time.Second}
	t := time.NewTicker(replReportInterval)
	defer t.Stop()
	for {
		for _, rep := range a.replicationReports(ctx, hc) {
			cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			_, err := a.rpc.ReportReplicationStatus(cctx, rep)
			cancel()
			if err != nil && ctx.Err() == nil {
				a.log.Debug("agent: replication report failed", "cluster", rep.Cluster, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// replicationReports reads the replication backlog of every cluster of
// the region that has namespaces in replication groups.
func (a *Agent) replicationReports(ctx context.Context, hc *http.Client) []*cpv1.ReportReplicationStatusRequest {
	type clusterNS struct {
		adminURL string
		remotes  map[string]string // Pulsar cluster name -> resource name
		ns       map[string]bool   // "tenant/ns"
	}
	byCluster := map[string]*clusterNS{}
	a.mu.Lock()
	for name, e := range a.resources {
		ns := e.change.GetNamespace()
		if ns == nil || e.change.GetDeleted() || ns.GetReplicationGroup() == "" {
			continue
		}
		cl := clusterOf(name)
		d := a.desired[cl]
		if d == nil || d.deleted || d.adminURL == "" {
			continue
		}
		c := byCluster[cl]
		if c == nil {
			c = &clusterNS{adminURL: d.adminURL, remotes: map[string]string{}, ns: map[string]bool{}}
			byCluster[cl] = c
		}
		segs := strings.Split(name, "/")
		c.ns[segs[5]+"/"+segs[7]] = true
		for _, rc := range ns.GetPolicies().GetReplicationClusters() {
			if rc != cl {
				c.remotes[a.pulsarName(rc)] = rc
			}
		}
	}
	a.mu.Unlock()
	var out []*cpv1.ReportReplicationStatusRequest
	for cl, c := range byCluster {
		urls := a.brokerAdminURLs(ctx, cl, c.adminURL)
		type key struct{ ns, remote string }
		sums := map[key]*cpv1.ReplicationBacklog{}
		complete := true
		for _, u := range urls {
			samples, err := scrapeReplication(ctx, hc, u)
			if err != nil {
				complete = false
				break
			}
			for _, s := range samples {
				rc, ok := c.remotes[s.remote]
				if !ok || !c.ns[s.ns] {
					continue
				}
				k := key{s.ns, rc}
				b := sums[k]
				if b == nil {
					b = &cpv1.ReplicationBacklog{Cluster: rc}
					sums[k] = b
				}
				switch s.metric {
				case "pulsar_replication_backlog":
					b.Messages += int64(s.value)
				case "pulsar_replication_delay_in_seconds":
					b.DelaySeconds = max(b.DelaySeconds, s.value)
				case "magnetar_replication_sent_messages_total":
					b.ReplicatedMessages += int64(s.value)
				}
			}
		}
		if !complete {
			continue // a broker did not answer: no partial sums
		}
		rep := &cpv1.ReportReplicationStatusRequest{Cluster: cl}
		for ns := range c.ns {
			n := &cpv1.ReportReplicationStatusRequest_Namespace{Namespace: ns}
			for _, rc := range c.remotes {
				b := sums[key{ns, rc}]
				if b == nil {
					b = &cpv1.ReplicationBacklog{Cluster: rc}
				}
				n.Backlog = append(n.Backlog, b)
			}
			rep.Namespaces = append(rep.Namespaces, n)
		}
		out = append(out, rep)
	}
	return out
}

type replSample struct {
	metric, ns, remote string
	value              float64
}

// scrapeReplication reads the pulsar_replication_backlog,
// pulsar_replication_delay_in_seconds and
// magnetar_replication_sent_messages_total series of one broker's /metrics
// (Prometheus text format).
func scrapeReplication(ctx context.Context, hc *http.Client, adminURL string) ([]replSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("GET %s/metrics: %s", adminURL, resp.Status)
	}
	var out []replSample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "pulsar_replication_backlog{") && !strings.HasPrefix(line, "pulsar_replication_delay_in_seconds{") &&
			!strings.HasPrefix(line, "magnetar_replication_sent_messages_total{") {
			continue
		}
		if s, ok := parseSample(line); ok {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// parseSample parses `name{k="v",...} value`.
func parseSample(line string) (replSample, bool) {
	open := strings.IndexByte(line, '{')
	end := strings.LastIndexByte(line, '}')
	if open < 0 || end < open {
		return replSample{}, false
	}
	s := replSample{metric: line[:open]}
	labels := line[open+1 : end]
	for labels != "" {
		eq := strings.IndexByte(labels, '=')
		if eq < 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return replSample{}, false
		}
		k := strings.TrimSpace(labels[:eq])
		rest := labels[eq+2:]
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
			}
			v.WriteByte(rest[i])
		}
		if i >= len(rest) {
			return replSample{}, false
		}
		switch k {
		case "namespace":
			s.ns = v.String()
		case "remote_cluster":
			s.remote = v.String()
		}
		labels = strings.TrimPrefix(rest[i+1:], ",")
	}
	f := strings.Fields(line[end+1:])
	if len(f) == 0 {
		return replSample{}, false
	}
	val, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return replSample{}, false
	}
	s.value = val
	return s, true
}
