package broker

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Topic- and subscription-level metrics, under Pulsar's names and labels
// (cluster, namespace, topic, subscription), for every topic loaded on
// the broker, when Config.TopicLevelMetrics is on (Pulsar's
// exposeTopicLevelMetricsInPrometheus; off by default here, see Config). Rates are over
// the last full window of rateWindowLen (0 until a topic has had one),
// from the counters behind the stats' msgInCounter and friends, so they do
// not depend on how often, or by how many, /metrics is scraped (the region
// agent reads it every 500 ms).
type topicCollector struct {
	s *Service

	producers, consumers, subscriptions          *prometheus.Desc
	rateIn, rateOut, throughputIn, throughputOut *prometheus.Desc
	storageSize, backlog                         *prometheus.Desc
	subBacklog, subUnacked, subDelayed           *prometheus.Desc
	subRateOut, subConsumers                     *prometheus.Desc

	mu   sync.Mutex
	prev map[*Topic]*rateWindow
	subs map[*Subscription]*rateWindow
}

// rateWindowLen is the period rates are measured over.
const rateWindowLen = 10 * time.Second

type flowSample struct {
	at                                 time.Time
	msgsIn, bytesIn, msgsOut, bytesOut int64
}

// rateWindow turns counter samples into per-second rates over windows of
// rateWindowLen.
type rateWindow struct {
	start flowSample
	// per second over the last full window: messages in, bytes in,
	// messages out, bytes out
	in, inBytes, out, outBytes float64
}

func (w *rateWindow) observe(cur flowSample) {
	if w.start.at.IsZero() {
		w.start = cur
		return
	}
	el := cur.at.Sub(w.start.at).Seconds()
	if el < rateWindowLen.Seconds() {
		return
	}
	w.in, w.inBytes = rate(cur.msgsIn, w.start.msgsIn, el), rate(cur.bytesIn, w.start.bytesIn, el)
	w.out, w.outBytes = rate(cur.msgsOut, w.start.msgsOut, el), rate(cur.bytesOut, w.start.bytesOut, el)
	w.start = cur
}

func newTopicCollector(s *Service) *topicCollector {
	tl := []string{"cluster", "namespace", "topic"}
	sl := []string{"cluster", "namespace", "topic", "subscription"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &topicCollector{s: s,
		producers:     d("pulsar_producers_count", "Producers connected to the topic.", tl),
		consumers:     d("pulsar_consumers_count", "Consumers connected to the topic.", tl),
		subscriptions: d("pulsar_subscriptions_count", "Subscriptions of the topic.", tl),
		rateIn:        d("pulsar_rate_in", "Messages per second stored for the topic's producers (since the previous scrape).", tl),
		rateOut:       d("pulsar_rate_out", "Messages per second dispatched to the topic's consumers (since the previous scrape).", tl),
		throughputIn:  d("pulsar_throughput_in", "Bytes per second stored for the topic's producers (since the previous scrape).", tl),
		throughputOut: d("pulsar_throughput_out", "Bytes per second dispatched to the topic's consumers (since the previous scrape).", tl),
		storageSize:   d("pulsar_storage_size", "Bytes of the topic's ledgers in the bookies and in tiered storage.", tl),
		backlog:       d("pulsar_msg_backlog", "Messages not yet acknowledged, summed over the topic's subscriptions.", tl),
		subBacklog:    d("pulsar_subscription_back_log", "Messages the subscription has not acknowledged.", sl),
		subUnacked:    d("pulsar_subscription_unacked_messages", "Messages dispatched to the subscription's consumers and not yet acknowledged.", sl),
		subDelayed:    d("pulsar_subscription_delayed", "Messages of the subscription held for delayed delivery.", sl),
		subRateOut:    d("pulsar_subscription_msg_rate_out", "Messages per second dispatched to the subscription's consumers (since the previous scrape).", sl),
		subConsumers:  d("pulsar_subscription_consumers_count", "Consumers of the subscription.", sl),
		prev:          map[*Topic]*rateWindow{},
		subs:          map[*Subscription]*rateWindow{},
	}
}

func (c *topicCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.producers, c.consumers, c.subscriptions, c.rateIn, c.rateOut, c.throughputIn,
		c.throughputOut, c.storageSize, c.backlog, c.subBacklog, c.subUnacked, c.subDelayed, c.subRateOut, c.subConsumers} {
		ch <- d
	}
}

// rate is (now-then)/elapsed.
func rate(now, then int64, el float64) float64 {
	if el <= 0 || now < then {
		return 0
	}
	return float64(now-then) / el
}

func (c *topicCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	cluster := c.s.cfg.ClusterName
	seenT, seenS := make(map[*Topic]*rateWindow, len(c.prev)), make(map[*Subscription]*rateWindow, len(c.subs))
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range c.s.openTopics() {
		ns, topic := t.name.Tenant+"/"+t.name.Namespace, t.name.String()
		t.mu.Lock()
		nProducers := len(t.producers)
		subs := make([]*Subscription, 0, len(t.subs))
		for _, sub := range t.subs {
			subs = append(subs, sub)
		}
		t.mu.Unlock()
		w := c.prev[t]
		if w == nil {
			w = &rateWindow{}
		}
		w.observe(flowSample{at: now, msgsIn: t.in.msgs.Load(), bytesIn: t.in.bytes.Load(), msgsOut: t.out.msgs.Load(), bytesOut: t.out.bytes.Load()})
		seenT[t] = w
		g(c.producers, float64(nProducers), cluster, ns, topic)
		g(c.subscriptions, float64(len(subs)), cluster, ns, topic)
		g(c.rateIn, w.in, cluster, ns, topic)
		g(c.rateOut, w.out, cluster, ns, topic)
		g(c.throughputIn, w.inBytes, cluster, ns, topic)
		g(c.throughputOut, w.outBytes, cluster, ns, topic)
		if t.ml != nil {
			g(c.storageSize, float64(t.ml.TotalSize()), cluster, ns, topic)
		}
		consumers, backlog := 0, int64(0)
		for _, sub := range subs {
			var subBacklog int64
			if sub.cursor != nil {
				subBacklog = sub.cursor.Backlog()
			}
			backlog += subBacklog
			sub.mu.Lock()
			nCons, delayed := len(sub.consumers), len(sub.delayed)
			unacked := 0
			for _, cons := range sub.consumers {
				for _, n := range cons.pending {
					unacked += n
				}
			}
			sub.mu.Unlock()
			consumers += nCons
			sw := c.subs[sub]
			if sw == nil {
				sw = &rateWindow{}
			}
			sw.observe(flowSample{at: now, msgsOut: sub.out.msgs.Load(), bytesOut: sub.out.bytes.Load()})
			seenS[sub] = sw
			g(c.subBacklog, float64(subBacklog), cluster, ns, topic, sub.name)
			g(c.subUnacked, float64(unacked), cluster, ns, topic, sub.name)
			g(c.subDelayed, float64(delayed), cluster, ns, topic, sub.name)
			g(c.subRateOut, sw.out, cluster, ns, topic, sub.name)
			g(c.subConsumers, float64(nCons), cluster, ns, topic, sub.name)
		}
		g(c.consumers, float64(consumers), cluster, ns, topic)
		g(c.backlog, float64(backlog), cluster, ns, topic)
	}
	c.prev, c.subs = seenT, seenS // unloaded topics are forgotten
}
