package broker

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-dev/magnetar/dataplane/bundle"
)

// The load manager runs on the elected leader broker. Every period it reads
// the brokers' load reports and decides (shedDecisions, a pure function)
// which bundles to split and which to move; it carries the decisions out
// through the owners' admin API, as an operator would.
//
// Policy (written down because Pulsar has several shedders):
//   - a bundle with more than MaxTopicsPerBundle topics is split at its
//     midpoint (Pulsar's loadBalancerNamespaceBundleMaxTopics, default 1000);
//   - a broker is overloaded when it serves more than 1.5x the mean number
//     of topics and at least ShedMinTopics more than the least loaded
//     broker; its busiest bundle that is not its only one is unloaded to the
//     least loaded broker. One move per period, so the cluster settles.
const (
	MaxTopicsPerBundle = 1000
	ShedMinTopics      = 10
)

// bundleLoad is one bundle in a load report.
type bundleLoad struct {
	Bundle string `json:"bundle"` // tenant/ns/0xlo_0xhi
	Topics int    `json:"topics"`
}

// loadDecision is one action of the load manager.
type loadDecision struct {
	Split  bool
	Bundle string // tenant/ns/0xlo_0xhi
	Owner  BrokerInfo
	Dest   BrokerInfo // for unloads
}

// shedDecisions decides what to do with the given reports. It is pure.
func shedDecisions(brokers []BrokerInfo, maxTopicsPerBundle, minTopics int) []loadDecision {
	var out []loadDecision
	for _, b := range brokers {
		for _, bl := range b.Load.BundleTopics {
			if bl.Topics > maxTopicsPerBundle {
				out = append(out, loadDecision{Split: true, Bundle: bl.Bundle, Owner: b})
			}
		}
	}
	if len(out) > 0 || len(brokers) < 2 {
		return out
	}
	sorted := slices.Clone(brokers)
	slices.SortFunc(sorted, func(a, b BrokerInfo) int {
		if a.Load.Topics != b.Load.Topics {
			return a.Load.Topics - b.Load.Topics
		}
		return strings.Compare(a.BrokerID, b.BrokerID)
	})
	least, most := sorted[0], sorted[len(sorted)-1]
	total := 0
	for _, b := range sorted {
		total += b.Load.Topics
	}
	mean := float64(total) / float64(len(sorted))
	if float64(most.Load.Topics) <= 1.5*mean || most.Load.Topics-least.Load.Topics < minTopics {
		return nil
	}
	if len(most.Load.BundleTopics) < 2 {
		return nil // moving its only bundle just moves the problem
	}
	bl := slices.MaxFunc(most.Load.BundleTopics, func(a, b bundleLoad) int {
		if a.Topics != b.Topics {
			return a.Topics - b.Topics
		}
		return strings.Compare(b.Bundle, a.Bundle)
	})
	// Moving more than half the gap would only swap the roles.
	if bl.Topics > most.Load.Topics-least.Load.Topics {
		return nil
	}
	return []loadDecision{{Bundle: bl.Bundle, Owner: most, Dest: least}}
}

type loadManager struct {
	o *ownership
}

func newLoadManager(o *ownership) *loadManager {
	return &loadManager{o: o}
}

// run decides and acts every period until ctx ends or leadership is lost.
func (lm *loadManager) run(ctx context.Context, lost <-chan struct{}) {
	if !lm.o.s.cfg.LoadShedding {
		select {
		case <-ctx.Done():
		case <-lost:
		}
		return
	}
	tick := time.NewTicker(lm.o.s.cfg.LoadManagerInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-tick.C:
		}
		brokers, err := lm.o.s.Brokers(ctx)
		if err != nil {
			continue
		}
		for _, d := range shedDecisions(brokers, MaxTopicsPerBundle, ShedMinTopics) {
			if err := lm.apply(ctx, d); err != nil {
				lm.o.s.log.Warn("load manager action failed", "bundle", d.Bundle, "split", d.Split, "err", err)
			} else {
				action := "unload"
				if d.Split {
					action = "split"
				}
				lm.o.s.metrics.loadManagerMoves.WithLabelValues(action).Inc()
				lm.o.s.log.Info("load manager action", "bundle", d.Bundle, "split", d.Split, "from", d.Owner.BrokerID, "to", d.Dest.BrokerID)
			}
		}
	}
}

func (lm *loadManager) apply(ctx context.Context, d loadDecision) error {
	parts := strings.Split(d.Bundle, "/")
	if len(parts) != 3 {
		return fmt.Errorf("bad bundle %q", d.Bundle)
	}
	if _, err := bundle.ParseRange(parts[2]); err != nil {
		return err
	}
	u := strings.TrimSuffix(d.Owner.WebServiceURL, "/") + "/admin/v2/namespaces/" + parts[0] + "/" + parts[1] + "/" + parts[2]
	if d.Split {
		u += "/split?unload=false"
	} else {
		u += "/unload?destinationBroker=" + url.QueryEscape(d.Dest.BrokerID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, nil)
	if err != nil {
		return err
	}
	if err := lm.o.s.SignInternal(req); err != nil {
		return err
	}
	resp, err := lm.o.s.PeerHTTPClient().Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return nil
}

// loadReport summarizes this broker's load.
func (s *Service) loadReport() LoadReport {
	r := LoadReport{Timestamp: time.Now().UnixMilli()}
	s.rates.fill(&r, s.metrics)
	// The owned bundles, parsed once and grouped by namespace ("t/ns").
	type ownedRange struct {
		key    string
		r      bundle.Range
		topics int
	}
	byNS := map[string][]*ownedRange{}
	var all []*ownedRange
	s.own.mu.Lock()
	for k := range s.own.owned {
		i := strings.LastIndexByte(k, '/')
		if rg, err := bundle.ParseRange(k[i+1:]); err == nil {
			o := &ownedRange{key: k, r: rg}
			byNS[k[:i]] = append(byNS[k[:i]], o)
			all = append(all, o)
		}
	}
	s.own.mu.Unlock()
	for _, t := range s.openTopics() {
		r.Topics++
		t.mu.Lock()
		r.Producers += len(t.producers)
		for _, sub := range t.subs {
			sub.mu.Lock()
			r.Consumers += len(sub.consumers)
			sub.mu.Unlock()
		}
		t.mu.Unlock()
		h := bundle.Hash(t.name.String())
		for _, o := range byNS[t.name.Tenant+"/"+t.name.Namespace] {
			if o.r.Contains(h) {
				o.topics++
				break
			}
		}
	}
	for _, o := range all {
		r.BundleTopics = append(r.BundleTopics, bundleLoad{Bundle: o.key, Topics: o.topics})
	}
	slices.SortFunc(r.BundleTopics, func(a, b bundleLoad) int { return strings.Compare(a.Bundle, b.Bundle) })
	return r
}

// rateMeter turns the broker's cumulative counters into the per-second
// rates of a load report (between two consecutive reports).
type rateMeter struct {
	mu                                    sync.Mutex
	at                                    time.Time
	msgIn, bytesIn, msgOut, bytesOut, cpu float64
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func (rm *rateMeter) fill(r *LoadReport, m *metrics) {
	now := time.Now()
	msgIn, bytesIn := counterValue(m.inMessages), counterValue(m.inBytes)
	msgOut, bytesOut := counterValue(m.outMessages), counterValue(m.outBytes)
	cpu, rss := processUsage()
	r.MemoryBytes = rss
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if !rm.at.IsZero() {
		if dt := now.Sub(rm.at).Seconds(); dt > 0 {
			r.MsgRateIn = (msgIn - rm.msgIn) / dt
			r.ThroughputIn = (bytesIn - rm.bytesIn) / dt
			r.MsgRateOut = (msgOut - rm.msgOut) / dt
			r.ThroughputOut = (bytesOut - rm.bytesOut) / dt
			r.CPU = (cpu - rm.cpu) / dt
		}
	}
	rm.at, rm.msgIn, rm.bytesIn, rm.msgOut, rm.bytesOut, rm.cpu = now, msgIn, bytesIn, msgOut, bytesOut, cpu
}

// processUsage returns this process's CPU seconds and resident bytes from
// /proc (zeros where /proc is absent).
func processUsage() (cpuSeconds float64, rss int64) {
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		// Fields after the command name (which may hold spaces) start at ")".
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 12 {
				ut, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				cpuSeconds = (ut + st) / 100 // USER_HZ is 100 on Linux
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			rss = pages * int64(os.Getpagesize())
		}
	}
	return cpuSeconds, rss
}
