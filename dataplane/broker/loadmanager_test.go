package broker

import (
	"testing"
	"time"
)

func TestShedDecisions(t *testing.T) {
	br := func(id string, bundles ...bundleLoad) BrokerInfo {
		b := BrokerInfo{BrokerID: id, WebServiceURL: "http://" + id}
		for _, bl := range bundles {
			b.Load.Topics += bl.Topics
		}
		b.Load.BundleTopics = bundles
		return b
	}
	bl := func(name string, n int) bundleLoad { return bundleLoad{Bundle: "t/ns/" + name, Topics: n} }
	cases := []struct {
		name    string
		brokers []BrokerInfo
		want    []loadDecision
	}{
		{"one broker, nothing to move", []BrokerInfo{br("a", bl("x", 50), bl("y", 50))}, nil},
		{"balanced", []BrokerInfo{br("a", bl("x", 20)), br("b", bl("y", 22))}, nil},
		{"overloaded moves its busiest movable bundle", []BrokerInfo{br("a", bl("x", 30), bl("y", 10)), br("b")},
			[]loadDecision{{Bundle: "t/ns/x", Owner: br("a", bl("x", 30), bl("y", 10)), Dest: br("b")}}},
		{"a single bundle is not moved", []BrokerInfo{br("a", bl("x", 40)), br("b")}, nil},
		{"gap below the minimum", []BrokerInfo{br("a", bl("x", 5), bl("y", 4)), br("b")}, nil},
		{"hot bundle is split first", []BrokerInfo{br("a", bl("x", MaxTopicsPerBundle+1)), br("b")},
			[]loadDecision{{Split: true, Bundle: "t/ns/x", Owner: br("a", bl("x", MaxTopicsPerBundle+1))}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := shedDecisions(c.brokers, MaxTopicsPerBundle, ShedMinTopics)
			if len(got) != len(c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			for i := range got {
				g, w := got[i], c.want[i]
				if g.Split != w.Split || g.Bundle != w.Bundle || g.Owner.BrokerID != w.Owner.BrokerID || g.Dest.BrokerID != w.Dest.BrokerID {
					t.Fatalf("decision %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestRateMeter(t *testing.T) {
	s := &Service{}
	m := newMetrics(s)
	var rm rateMeter
	var r LoadReport
	rm.fill(&r, m) // first report: no rates yet
	if r.MemoryBytes <= 0 {
		t.Fatalf("resident memory %d", r.MemoryBytes)
	}
	m.inMessages.Add(100)
	m.inBytes.Add(102400)
	rm.at = rm.at.Add(-time.Second) // as if the last report were a second ago
	rm.fill(&r, m)
	if r.MsgRateIn < 50 || r.MsgRateIn > 100 || r.ThroughputIn < 51200 || r.MsgRateOut != 0 {
		t.Fatalf("rates after 100 messages in ~1s: %+v", r)
	}
}
