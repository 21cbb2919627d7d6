package consul_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul/consultest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Test timings: the registrar measures every interval; the watcher's
// blocking queries wait at most waitTime.
const (
	interval = 200 * time.Millisecond
	waitTime = 5 * time.Second
	// patience bounds every wait for Consul; the machine may be busy.
	patience = 30 * time.Second
)

// eventually polls cond until it returns nil, failing t with its last
// error after patience.
func eventually(t *testing.T, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < patience {
		if err = cond(); err == nil {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond) // polling Consul
	}
	t.Fatalf("%s: not after %s: %v", what, patience, err)
	return 0
}

// health is a HealthFunc whose answer a test sets.
type health struct {
	status atomic.Value // consul.Status
	calls  atomic.Int64
}

func newHealth() *health {
	h := &health{}
	h.status.Store(consul.StatusPassing)
	return h
}

func (h *health) set(s consul.Status) { h.status.Store(s) }

func (h *health) measure(_ context.Context, c consul.Cluster) map[string]consul.Check {
	h.calls.Add(1)
	s := h.status.Load().(consul.Status)
	out := map[string]consul.Check{}
	for _, b := range c.Brokers {
		out[b.ID] = consul.Check{Status: s, Output: "test says " + string(s)}
	}
	return out
}

// events records a watcher's events.
type events struct {
	mu  sync.Mutex
	got []consul.ClusterEvent
}

func (e *events) add(ev consul.ClusterEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

// find returns the time of the first event after since that took k to.
func (e *events) find(k consul.ClusterKey, to consul.Status, since time.Time) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.got {
		if ev.Cluster == k && ev.To == to && !ev.At.Before(since) {
			return ev.At, true
		}
	}
	return time.Time{}, false
}

func (e *events) removed() []consul.ClusterEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []consul.ClusterEvent
	for _, ev := range e.got {
		if ev.Removed {
			out = append(out, ev)
		}
	}
	return out
}

func quietLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() && os.Getenv("MAGNETAR_CONSUL_TEST_LOG") == "1" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testCluster is acme/prod: two brokers on loopback addresses that only
// Consul's answers need.
var testCluster = consul.Cluster{
	Org: "acme", Name: "prod",
	ServiceURL: "pulsar://127.0.0.11:6650,127.0.0.12:6651",
	Brokers: []consul.Broker{
		{ID: "broker-0", PulsarURL: "pulsar://127.0.0.11:6650", AdminURL: "http://127.0.0.11:8080"},
		{ID: "broker-1", PulsarURL: "pulsar://127.0.0.12:6651", AdminURL: "http://127.0.0.12:8081"},
	},
}

var prodKey = consul.ClusterKey{Org: "acme", Name: "prod"}

func startRegistrar(t *testing.T, a *consultest.Agent, token, region string, h *health) *consul.Registrar {
	t.Helper()
	r, err := consul.NewRegistrar(consul.RegistrarConfig{
		Consul:     consul.Config{Address: a.HTTPAddr, Token: token, Datacenter: a.Datacenter},
		Region:     region,
		Health:     h.measure,
		Interval:   interval,
		TTL:        10 * time.Second,
		MaxBackoff: time.Second,
		Logger:     quietLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return r
}

func startWatcher(t *testing.T, a *consultest.Agent, token string, ev *events) *consul.Watcher {
	t.Helper()
	w, err := consul.NewWatcher(consul.WatcherConfig{
		Consul:             consul.Config{Address: a.HTTPAddr, Token: token},
		WaitTime:           waitTime,
		DatacenterInterval: time.Second,
		MaxBackoff:         time.Second,
		OnChange:           ev.add,
		Logger:             quietLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return w
}

// remoteHealth reads acme/prod's instances in dc through another
// datacenter's agent (?dc=).
func remoteHealth(cl *api.Client, dc string) ([]*api.ServiceEntry, error) {
	es, _, err := cl.Health().Service("acme", "prod", false, &api.QueryOptions{Datacenter: dc})
	return es, err
}

func allStatus(es []*api.ServiceEntry, want string) error {
	if len(es) != 2 {
		return fmt.Errorf("%d instances, want 2", len(es))
	}
	for _, e := range es {
		if s := e.Checks.AggregatedStatus(); s != want {
			return fmt.Errorf("%s is %s, want %s", e.Service.ID, s, want)
		}
	}
	return nil
}

// lookup asks the agent's DNS server for name's records of type qtype.
func lookup(addr, name string, qtype uint16) ([]dns.RR, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Timeout: 2 * time.Second}
	in, _, err := c.Exchange(m, addr)
	if err != nil {
		return nil, err
	}
	return in.Answer, nil
}

func TestRegisterWatchAndResolve(t *testing.T) {
	cl := consultest.Start(t, consultest.Options{})
	dc1, dc2 := cl.Agent("dc1"), cl.Agent("dc2")
	h := newHealth()
	r := startRegistrar(t, dc2, "", "europe", h)
	if err := r.SetCluster(testCluster); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	w := startWatcher(t, dc1, "", ev)
	c1 := dc1.Client("")

	t.Run("visible from the other datacenter", func(t *testing.T) {
		d := eventually(t, "acme/prod passing in dc2, read through dc1", func() error {
			es, err := remoteHealth(c1, "dc2")
			if err != nil {
				return err
			}
			return allStatus(es, api.HealthPassing)
		})
		t.Logf("registered and passing, seen through dc1 ?dc=dc2, %s after start", d.Round(time.Millisecond))
		es, _ := remoteHealth(c1, "dc2")
		for _, e := range es {
			if e.Service.Meta[consul.MetaServiceURL] != testCluster.ServiceURL || !strings.HasPrefix(e.Service.Meta[consul.MetaPulsarURL], "pulsar://127.0.0.1") ||
				!slices.Contains(e.Service.Tags, "region=europe") || !slices.Contains(e.Service.Tags, "org=acme") {
				t.Errorf("instance %s: tags %v meta %v", e.Service.ID, e.Service.Tags, e.Service.Meta)
			}
		}
		agents, _, err := c1.Catalog().Service(consul.AgentService, "", &api.QueryOptions{Datacenter: "dc2"})
		if err != nil || len(agents) != 1 || agents[0].ServiceMeta[consul.MetaRegion] != "europe" {
			t.Errorf("region agent in dc2: %v %+v", err, agents)
		}
	})

	t.Run("watcher finds the region and the cluster", func(t *testing.T) {
		eventually(t, "watcher view", func() error {
			v := w.View()
			reg, ok := v.Region("europe")
			if !ok || reg.Datacenter != "dc2" || reg.Status != consul.StatusPassing {
				return fmt.Errorf("region europe: %+v (%v)", reg, ok)
			}
			c, ok := v.Cluster("acme", "prod")
			if !ok || c.Status != consul.StatusPassing || len(c.Brokers) != 2 || c.Region != "europe" || c.Datacenter != "dc2" {
				return fmt.Errorf("cluster: %+v", c)
			}
			if c.Brokers[0].AdminURL != "http://127.0.0.11:8080" || c.Brokers[1].Port != 6651 || c.ServiceURL != testCluster.ServiceURL {
				return fmt.Errorf("brokers: %+v", c.Brokers)
			}
			if v.Stale || v.LastRefresh.IsZero() || len(v.Datacenters) != 2 {
				return fmt.Errorf("stale %v, last refresh %v, datacenters %+v", v.Stale, v.LastRefresh, v.Datacenters)
			}
			return nil
		})
	})

	t.Run("dns", func(t *testing.T) {
		name := consul.DNSName("acme", "prod", "dc2", "")
		for _, a := range []*consultest.Agent{dc2, dc1} {
			eventually(t, name+" A at "+a.Datacenter, func() error {
				rrs, err := lookup(a.DNSAddr, name, dns.TypeA)
				if err != nil {
					return err
				}
				var got []string
				for _, rr := range rrs {
					if ar, ok := rr.(*dns.A); ok {
						got = append(got, ar.A.String())
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, []string{"127.0.0.11", "127.0.0.12"}) {
					return fmt.Errorf("A records %v", got)
				}
				return nil
			})
		}
		rrs, err := lookup(dc2.DNSAddr, name, dns.TypeSRV)
		if err != nil {
			t.Fatal(err)
		}
		var ports []int
		for _, rr := range rrs {
			if s, ok := rr.(*dns.SRV); ok {
				ports = append(ports, int(s.Port))
			}
		}
		slices.Sort(ports)
		if !slices.Equal(ports, []int{6650, 6651}) {
			t.Errorf("SRV ports %v, want 6650 6651", ports)
		}
	})

	t.Run("checks follow the health function", func(t *testing.T) {
		for _, step := range []struct {
			status consul.Status
			dnsA   int
		}{{consul.StatusCritical, 0}, {consul.StatusPassing, 2}} {
			start := time.Now()
			h.set(step.status)
			inConsul := eventually(t, "instances "+string(step.status), func() error {
				es, err := remoteHealth(c1, "dc2")
				if err != nil {
					return err
				}
				return allStatus(es, string(step.status))
			})
			var at time.Time
			eventually(t, "watcher event to "+string(step.status), func() error {
				var ok bool
				if at, ok = ev.find(prodKey, step.status, start); !ok {
					return errors.New("no event yet")
				}
				return nil
			})
			t.Logf("health function %s: in Consul (dc1 ?dc=dc2) after %s, watcher event after %s (interval %s)",
				step.status, inConsul.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond), interval)
			eventually(t, "DNS answers with the passing brokers only", func() error {
				rrs, err := lookup(dc2.DNSAddr, consul.DNSName("acme", "prod", "dc2", ""), dns.TypeA)
				if err != nil {
					return err
				}
				if len(rrs) != step.dnsA {
					return fmt.Errorf("%d A records, want %d", len(rrs), step.dnsA)
				}
				return nil
			})
		}
	})

	t.Run("setting an unchanged cluster registers nothing", func(t *testing.T) {
		before := r.Status().Registrations
		for range 3 {
			if err := r.SetCluster(testCluster); err != nil {
				t.Fatal(err)
			}
		}
		since := time.Now()
		eventually(t, "two more passes", func() error {
			if st := r.Status(); !st.LastSync.After(since.Add(interval)) {
				return fmt.Errorf("last sync %s", st.LastSync)
			}
			return nil
		})
		if got := r.Status().Registrations; got != before {
			t.Errorf("registrations %d, want %d", got, before)
		}
	})

	t.Run("scale down and delete", func(t *testing.T) {
		one := testCluster
		one.Brokers = one.Brokers[:1]
		if err := r.SetCluster(one); err != nil {
			t.Fatal(err)
		}
		eventually(t, "one broker left", func() error {
			es, err := remoteHealth(c1, "dc2")
			if err != nil {
				return err
			}
			if len(es) != 1 {
				return fmt.Errorf("%d instances", len(es))
			}
			return nil
		})
		r.DeleteCluster("acme", "prod")
		eventually(t, "cluster deregistered and reported removed", func() error {
			es, err := remoteHealth(c1, "dc2")
			if err != nil {
				return err
			}
			if len(es) != 0 {
				return fmt.Errorf("%d instances", len(es))
			}
			if len(ev.removed()) != 1 {
				return fmt.Errorf("removal events %+v", ev.removed())
			}
			return nil
		})
		if st := r.Status(); st.Deregistrations != 2 {
			t.Errorf("deregistrations %d, want 2", st.Deregistrations)
		}
	})
}

func TestStaticStability(t *testing.T) {
	cl := consultest.Start(t, consultest.Options{})
	dc1, dc2 := cl.Agent("dc1"), cl.Agent("dc2")
	h := newHealth()
	r := startRegistrar(t, dc2, "", "europe", h)
	if err := r.SetCluster(testCluster); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	w := startWatcher(t, dc1, "", ev)
	passing := func() error {
		c, ok := w.View().Cluster("acme", "prod")
		if !ok || c.Status != consul.StatusPassing {
			return fmt.Errorf("cluster %+v", c)
		}
		if w.View().Stale {
			return errors.New("view stale")
		}
		return nil
	}
	eventually(t, "registered and watched", passing)

	t.Run("region's consul killed", func(t *testing.T) {
		killed := time.Now()
		dc2.Kill()
		calls := h.calls.Load()
		eventually(t, "registrar and watcher report stale", func() error {
			if st := r.Status(); !st.Stale || st.Err == nil {
				return fmt.Errorf("registrar %+v", st)
			}
			d, _ := w.View().Datacenter("dc2")
			if !d.Stale {
				return fmt.Errorf("dc2 %+v", d)
			}
			return nil
		})
		v := w.View()
		c, ok := v.Cluster("acme", "prod")
		d, _ := v.Datacenter("dc2")
		if !v.Stale || !ok || c.Status != consul.StatusPassing || len(c.Brokers) != 2 || !d.LastRefresh.Before(killed) {
			t.Errorf("view during the outage: stale %v, cluster %+v, dc2 %+v", v.Stale, c, d)
		}
		if _, ok := v.Region("europe"); !ok {
			t.Error("region europe dropped from the view")
		}
		t.Logf("during the outage: registrar %v; dc2 %q, last refresh %s before the kill",
			r.Status().Err, d.Err, killed.Sub(d.LastRefresh).Round(time.Millisecond))
		eventually(t, "registrar keeps measuring", func() error {
			if h.calls.Load() < calls+3 {
				return errors.New("health function not called")
			}
			return nil
		})
		if len(ev.removed()) != 0 || r.Status().Deregistrations != 0 {
			t.Errorf("removed %+v, deregistrations %d", ev.removed(), r.Status().Deregistrations)
		}
	})

	t.Run("region's consul restarted empty", func(t *testing.T) {
		regs := r.Status().Registrations
		restarted := time.Now()
		dc2.Restart(t)
		d := eventually(t, "re-registered and watched", func() error {
			if st := r.Status(); st.Stale || st.Registrations < regs+3 {
				return fmt.Errorf("registrar %+v", st)
			}
			return passing()
		})
		t.Logf("restarted dc2 agent: started and WAN-joined in %s, then re-registered and seen passing by the watcher %s later",
			(time.Since(restarted) - d).Round(time.Millisecond), d.Round(time.Millisecond))
		if r.Status().Deregistrations != 0 {
			t.Errorf("deregistrations %d", r.Status().Deregistrations)
		}
	})

	t.Run("watcher's consul killed", func(t *testing.T) {
		killed := time.Now()
		dc1.Kill()
		eventually(t, "whole view stale", func() error {
			v := w.View()
			d1, _ := v.Datacenter("dc1")
			d2, _ := v.Datacenter("dc2")
			if !v.Stale || !d1.Stale || !d2.Stale {
				return fmt.Errorf("view stale %v, dc1 %+v, dc2 %+v", v.Stale, d1, d2)
			}
			return nil
		})
		v := w.View()
		if c, ok := v.Cluster("acme", "prod"); !ok || c.Status != consul.StatusPassing || !v.LastRefresh.Before(killed) {
			t.Errorf("view: cluster %+v, last refresh %s", c, v.LastRefresh)
		}
		if st := r.Status(); st.Stale {
			t.Errorf("registrar (dc2) stale: %v", st.Err)
		}
		dc1.Restart(t)
		eventually(t, "view fresh again", passing)
		if len(ev.removed()) != 0 {
			t.Errorf("removed %+v", ev.removed())
		}
	})
}

func TestACL(t *testing.T) {
	cl := consultest.Start(t, consultest.Options{ACL: true})
	dc1, dc2 := cl.Agent("dc1"), cl.Agent("dc2")

	t.Run("unknown token", func(t *testing.T) {
		r := startRegistrar(t, dc2, "00000000-0000-4000-8000-000000000000", "europe", newHealth())
		var ae *consul.ACLError
		eventually(t, "ACL error", func() error {
			if err := r.Status().Err; !errors.As(err, &ae) {
				return fmt.Errorf("err %v", err)
			}
			return nil
		})
		msg := ae.Error()
		t.Logf("unknown token: %s", msg)
		if !strings.Contains(msg, "ACL not found") || !strings.Contains(msg, "--consul-token") || !strings.Contains(msg, "service:") {
			t.Errorf("message %q", msg)
		}
		ev := &events{}
		w := startWatcher(t, dc1, "00000000-0000-4000-8000-000000000000", ev)
		eventually(t, "watcher ACL error", func() error {
			v := w.View()
			d, _ := v.Datacenter("dc1")
			if !v.Stale || !strings.Contains(d.Err, "ACL not found") {
				return fmt.Errorf("view %+v", v)
			}
			return nil
		})
		d, _ := w.View().Datacenter("dc1")
		t.Logf("watcher, unknown token: %s", d.Err)
	})

	t.Run("token lacking the permission", func(t *testing.T) {
		token := cl.CreateToken(t, "agent-only", `service "magnetar-agent" { policy = "write" }`)
		r := startRegistrar(t, dc2, token, "europe", newHealth())
		if err := r.SetCluster(testCluster); err != nil {
			t.Fatal(err)
		}
		var ae *consul.ACLError
		eventually(t, "ACL error", func() error {
			if err := r.Status().Err; !errors.As(err, &ae) || !strings.Contains(ae.Permission, `"acme"`) {
				return fmt.Errorf("err %v", err)
			}
			return nil
		})
		t.Logf("token without service:write on acme: %s", ae.Error())
		if !strings.Contains(ae.Error(), "Permission denied") {
			t.Errorf("message %q", ae.Error())
		}
	})

	t.Run("sufficient token", func(t *testing.T) {
		token := cl.CreateToken(t, "region-agent",
			`service "magnetar-agent" { policy = "write" }
service "acme" { policy = "write" }`)
		h := newHealth()
		r := startRegistrar(t, dc2, token, "europe2", h)
		if err := r.SetCluster(testCluster); err != nil {
			t.Fatal(err)
		}
		eventually(t, "in sync", func() error {
			if st := r.Status(); st.Stale {
				return fmt.Errorf("registrar %v", st.Err)
			}
			return nil
		})
		watchToken := cl.CreateToken(t, "control-plane", `service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }`)
		ev := &events{}
		w := startWatcher(t, dc1, watchToken, ev)
		eventually(t, "watched", func() error {
			v := w.View()
			if c, ok := v.Cluster("acme", "prod"); !ok || c.Status != consul.StatusPassing || c.Datacenter != "dc2" || v.Stale {
				return fmt.Errorf("view %+v", v)
			}
			return nil
		})
	})
}
