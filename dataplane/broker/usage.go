package broker

// Usage metering for billing: monotonic counters per (tenant, namespace) of
// this broker process, and sampled gauges, read by the region agent through
// Service.Usage (served by the admin API at GET /magnetar/v1/usage).
//
// Counters start at zero when the process starts and only grow; the
// process's Epoch (random, new for every process) lets a reader tell a
// restart from a counter that did not move, so it never counts the same
// increment twice. Bytes are payload bytes (protocol.PayloadSize: a batch
// counts its payload with the messages' single-message metadata, not the
// message metadata header). In is counted when an entry is stored (its
// receipt sent), out when an entry is handed to a consumer's connection.
//
// Geo-replication increments ReplicatedOut through
// Service.CountReplicatedOut for the payload bytes a replicator sent to
// another region's cluster.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-dev/magnetar/billing"
	"github.com/magnetar-dev/magnetar/dataplane/protocol"
)

// nsKey is a (tenant, namespace) pair.
type nsKey struct{ tenant, namespace string }

// nsCounters are one namespace's counters.
type nsCounters struct {
	msgsIn, bytesIn, msgsOut, bytesOut, msgsReplOut, bytesReplOut atomic.Int64
	// The part of in and out of non-persistent topics (billed from these
	// counters; persistent topics from their durable counters).
	npMsgsIn, npBytesIn, npMsgsOut, npBytesOut atomic.Int64
	// Seconds the namespace's function instances ran on this broker.
	fnSeconds atomic.Int64
}

// usageMeter holds the counters; the map only grows (a namespace's entry
// is never removed, so the counters stay monotonic).
type usageMeter struct {
	epoch string
	mu    sync.RWMutex
	ns    map[nsKey]*nsCounters
}

func newUsageMeter() *usageMeter {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("broker: no randomness for the usage epoch: " + err.Error())
	}
	return &usageMeter{epoch: hex.EncodeToString(b[:]), ns: map[nsKey]*nsCounters{}}
}

// of returns the counters of t's namespace, creating them.
func (u *usageMeter) of(t TopicName) *nsCounters {
	k := nsKey{t.Tenant, t.Namespace}
	u.mu.RLock()
	c := u.ns[k]
	u.mu.RUnlock()
	if c != nil {
		return c
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if c = u.ns[k]; c == nil {
		c = &nsCounters{}
		u.ns[k] = c
	}
	return c
}

// in counts an entry of payload bytes stored for a producer.
func (u *usageMeter) in(t TopicName, msgs int32, payload int64) {
	c := u.of(t)
	c.msgsIn.Add(int64(max(msgs, 1)))
	c.bytesIn.Add(payload)
	if t.Domain == NonPersistent {
		c.npMsgsIn.Add(int64(max(msgs, 1)))
		c.npBytesIn.Add(payload)
	}
}

// out counts an entry handed to a consumer.
func (u *usageMeter) out(t TopicName, msgs int, entry []byte) {
	c := u.of(t)
	c.msgsOut.Add(int64(max(msgs, 1)))
	c.bytesOut.Add(int64(protocol.PayloadSize(entry)))
	if t.Domain == NonPersistent {
		c.npMsgsOut.Add(int64(max(msgs, 1)))
		c.npBytesOut.Add(int64(protocol.PayloadSize(entry)))
	}
}

// CountReplicatedOut counts messages and payload bytes of topic t sent to
// another region's cluster by geo-replication (the billing meter
// bytes_replicated_out).
func (s *Service) CountReplicatedOut(t TopicName, msgs, bytes int64) {
	c := s.metrics.usage.of(t)
	c.msgsReplOut.Add(msgs)
	c.bytesReplOut.Add(bytes)
}

// CountFunctionSeconds adds the seconds function instances of tenant/ns
// ran on this broker's function worker (the billing meter
// function_instance_seconds).
func (s *Service) CountFunctionSeconds(tenant, ns string, seconds int64) {
	s.metrics.usage.of(TopicName{Domain: Persistent, Tenant: tenant, Namespace: ns}).fnSeconds.Add(seconds)
}

// NamespaceUsage and Usage are the report's format (billing.UsageReport).
type (
	NamespaceUsage = billing.NamespaceUsage
	Usage          = billing.UsageReport
)

// Usage reports the counters and samples the gauges. It first counts the
// entries every durable subscription consumed since the last count
// (usage_durable.go), reading them (each read bounded by usageReadTimeout).
func (s *Service) Usage() Usage {
	ctx := context.Background()
	u := s.metrics.usage
	byNS := map[nsKey]*NamespaceUsage{}
	get := func(k nsKey) *NamespaceUsage {
		n := byNS[k]
		if n == nil {
			n = &NamespaceUsage{Tenant: k.tenant, Namespace: k.namespace}
			byNS[k] = n
		}
		return n
	}
	u.mu.RLock()
	for k, c := range u.ns {
		n := get(k)
		n.MessagesIn, n.BytesIn = c.msgsIn.Load(), c.bytesIn.Load()
		n.MessagesOut, n.BytesOut = c.msgsOut.Load(), c.bytesOut.Load()
		n.MessagesReplicatedOut, n.BytesReplicatedOut = c.msgsReplOut.Load(), c.bytesReplOut.Load()
		n.NonPersistentMessagesIn, n.NonPersistentBytesIn = c.npMsgsIn.Load(), c.npBytesIn.Load()
		n.NonPersistentMessagesOut, n.NonPersistentBytesOut = c.npMsgsOut.Load(), c.npBytesOut.Load()
		n.FunctionInstanceSeconds = c.fnSeconds.Load()
	}
	u.mu.RUnlock()
	var sources []billing.SourceUsage
	for _, t := range s.openTopics() {
		if err := t.usage.advanceOut(ctx, ""); err != nil {
			s.log.Warn("usage: counting consumed entries failed", "topic", t.name.String(), "err", err)
		}
		sources = append(sources, t.usage.report()...)
		n := get(nsKey{t.name.Tenant, t.name.Namespace})
		n.Partitions++
		if t.name.PartitionIndex() <= 0 {
			n.Topics++
		}
		if t.ml != nil {
			n.StorageBytes += t.ml.TotalSize()
		}
	}
	out := Usage{Epoch: u.epoch, Namespaces: make([]NamespaceUsage, 0, len(byNS)), Sources: sources}
	for _, n := range byNS {
		out.Namespaces = append(out.Namespaces, *n)
	}
	sort.Slice(out.Namespaces, func(i, j int) bool {
		a, b := out.Namespaces[i], out.Namespaces[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return a.Namespace < b.Namespace
	})
	return out
}

// usageCollector exports the counters as Prometheus series labelled by
// tenant and namespace, with the epoch as an info series.
type usageCollector struct {
	u                                   *usageMeter
	epoch, msgsIn, bytesIn, msgsOut     *prometheus.Desc
	bytesOut, msgsReplOut, bytesReplOut *prometheus.Desc
}

func newUsageCollector(u *usageMeter) *usageCollector {
	l := []string{"tenant", "namespace"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, l, nil) }
	return &usageCollector{u: u,
		epoch:        prometheus.NewDesc("magnetar_usage_epoch_info", "The broker process's usage epoch (new for every process); value 1.", []string{"epoch"}, nil),
		msgsIn:       d("magnetar_usage_in_messages_total", "Messages stored for producers, by namespace, since the process started."),
		bytesIn:      d("magnetar_usage_in_bytes_total", "Payload bytes stored for producers, by namespace, since the process started."),
		msgsOut:      d("magnetar_usage_out_messages_total", "Messages dispatched to consumers, by namespace, since the process started."),
		bytesOut:     d("magnetar_usage_out_bytes_total", "Payload bytes dispatched to consumers, by namespace, since the process started."),
		msgsReplOut:  d("magnetar_usage_replicated_out_messages_total", "Messages sent to other regions by geo-replication, by namespace."),
		bytesReplOut: d("magnetar_usage_replicated_out_bytes_total", "Payload bytes sent to other regions by geo-replication, by namespace."),
	}
}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.epoch, c.msgsIn, c.bytesIn, c.msgsOut, c.bytesOut, c.msgsReplOut, c.bytesReplOut} {
		ch <- d
	}
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, 1, c.u.epoch)
	c.u.mu.RLock()
	defer c.u.mu.RUnlock()
	for k, n := range c.u.ns {
		for _, m := range []struct {
			d *prometheus.Desc
			v int64
		}{{c.msgsIn, n.msgsIn.Load()}, {c.bytesIn, n.bytesIn.Load()}, {c.msgsOut, n.msgsOut.Load()},
			{c.bytesOut, n.bytesOut.Load()}, {c.msgsReplOut, n.msgsReplOut.Load()}, {c.bytesReplOut, n.bytesReplOut.Load()}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v), k.tenant, k.namespace)
		}
	}
}
