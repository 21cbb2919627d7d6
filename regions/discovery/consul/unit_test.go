package consul

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"
)

func TestDNSName(t *testing.T) {
	for _, tc := range []struct {
		org, cluster, dc, domain, want string
		resolvable                     bool
	}{
		{"acme", "prod", "eu-west", "", "prod.acme.service.eu-west.consul", true},
		{"acme", "prod", "dc1", "example.internal.", "prod.acme.service.dc1.example.internal", true},
		{"acme", "a.b", "dc1", "", "a.b.acme.service.dc1.consul", false},
		{"ac_me", "prod", "dc1", "", "prod.ac_me.service.dc1.consul", false},
		{"acme", "-x", "dc1", "", "-x.acme.service.dc1.consul", false},
	} {
		if got := DNSName(tc.org, tc.cluster, tc.dc, tc.domain); got != tc.want {
			t.Errorf("DNSName(%q, %q, %q, %q) = %q, want %q", tc.org, tc.cluster, tc.dc, tc.domain, got, tc.want)
		}
		if got := DNSResolvable(tc.org, tc.cluster); got != tc.resolvable {
			t.Errorf("DNSResolvable(%q, %q) = %v, want %v", tc.org, tc.cluster, got, tc.resolvable)
		}
	}
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		c       Cluster
		wantErr error
		check   func(t *testing.T, c Cluster)
	}{
		{
			name: "address and port from the Pulsar URL",
			c:    Cluster{Org: "acme", Name: "prod", Brokers: []Broker{{ID: "broker-0", PulsarURL: "pulsar://10.1.2.3:6650"}}},
			check: func(t *testing.T, c Cluster) {
				if b := c.Brokers[0]; b.Address != "10.1.2.3" || b.Port != 6650 {
					t.Errorf("broker = %+v, want 10.1.2.3:6650", b)
				}
			},
		},
		{
			name: "explicit address and port win",
			c:    Cluster{Org: "acme", Name: "prod", Brokers: []Broker{{ID: "b0", PulsarURL: "pulsar://[::1]:6650", Address: "127.0.0.9", Port: 7000}}},
			check: func(t *testing.T, c Cluster) {
				if b := c.Brokers[0]; b.Address != "127.0.0.9" || b.Port != 7000 {
					t.Errorf("broker = %+v", b)
				}
			},
		},
		{name: "reserved organization consul", c: Cluster{Org: "consul", Name: "x"}, wantErr: ErrReservedName},
		{name: "reserved organization magnetar-agent", c: Cluster{Org: AgentService, Name: "x"}, wantErr: ErrReservedName},
		{name: "colon in name", c: Cluster{Org: "a:b", Name: "x"}, wantErr: ErrInvalid},
		{name: "slash in broker", c: Cluster{Org: "a", Name: "x", Brokers: []Broker{{ID: "b/0", Address: "h", Port: 1}}}, wantErr: ErrInvalid},
		{name: "duplicate broker", c: Cluster{Org: "a", Name: "x", Brokers: []Broker{{ID: "b", Address: "h", Port: 1}, {ID: "b", Address: "h", Port: 2}}}, wantErr: ErrInvalid},
		{name: "no address", c: Cluster{Org: "a", Name: "x", Brokers: []Broker{{ID: "b"}}}, wantErr: ErrInvalid},
		{name: "bad port", c: Cluster{Org: "a", Name: "x", Brokers: []Broker{{ID: "b", Address: "h", Port: 70000}}}, wantErr: ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.normalize()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}

func TestBrokerRegistrations(t *testing.T) {
	c, err := Cluster{
		Org: "acme", Name: "prod", ServiceURL: "pulsar://a:6650,b:6650",
		Brokers: []Broker{{ID: "broker-0", PulsarURL: "pulsar://a:6650", AdminURL: "http://a:8080"}},
	}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	regs := brokerRegistrations("eu", c, "30s")
	if len(regs) != 1 {
		t.Fatalf("%d registrations", len(regs))
	}
	r := regs[0]
	if r.ID != "magnetar:acme:prod:broker-0" || r.Name != "acme" || r.Address != "a" || r.Port != 6650 {
		t.Errorf("registration = %+v", r)
	}
	wantTags := []string{"prod", TagBroker, "org=acme", "cluster=prod", "region=eu"}
	if !slices.Equal(r.Tags, wantTags) {
		t.Errorf("tags = %v, want %v", r.Tags, wantTags)
	}
	wantMeta := map[string]string{
		MetaOrg: "acme", MetaCluster: "prod", MetaRegion: "eu", MetaBroker: "broker-0",
		MetaPulsarURL: "pulsar://a:6650", MetaAdminURL: "http://a:8080", MetaServiceURL: "pulsar://a:6650,b:6650",
	}
	if fmt.Sprint(r.Meta) != fmt.Sprint(wantMeta) {
		t.Errorf("meta = %v, want %v", r.Meta, wantMeta)
	}
	if r.Check.CheckID != "magnetar:acme:prod:broker-0:ttl" || r.Check.TTL != "30s" || r.Check.DeregisterCriticalServiceAfter != "" {
		t.Errorf("check = %+v", r.Check)
	}
}

// current turns registrations into what the agent would list.
func current(regs ...*api.AgentServiceRegistration) map[string]*api.AgentService {
	out := map[string]*api.AgentService{}
	for _, r := range regs {
		out[r.ID] = &api.AgentService{ID: r.ID, Service: r.Name, Tags: slices.Clone(r.Tags), Address: r.Address, Port: r.Port, Meta: r.Meta}
	}
	return out
}

func TestMakePlan(t *testing.T) {
	norm := func(org, name string, brokers ...string) Cluster {
		c := Cluster{Org: org, Name: name}
		for i, b := range brokers {
			c.Brokers = append(c.Brokers, Broker{ID: b, Address: "127.0.0.1", Port: 6650 + i})
		}
		n, err := c.normalize()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	agent := agentRegistration("eu", "", 0, "30s")
	prod3 := brokerRegistrations("eu", norm("acme", "prod", "b0", "b1", "b2"), "30s")
	prod2 := brokerRegistrations("eu", norm("acme", "prod", "b0", "b1"), "30s")
	other := brokerRegistrations("eu", norm("acme", "other", "b0"), "30s")
	moved := brokerRegistrations("eu", norm("acme", "prod", "b0"), "30s")
	moved[0].Port = 7000

	ids := func(regs []*api.AgentServiceRegistration) []string {
		var out []string
		for _, r := range regs {
			out = append(out, r.ID)
		}
		return out
	}
	key := ClusterKey{"acme", "prod"}
	for _, tc := range []struct {
		name            string
		desired         []*api.AgentServiceRegistration
		current         map[string]*api.AgentService
		owned, deleted  map[ClusterKey]bool
		force           map[string]bool
		wantReg, wantDe []string
	}{
		{
			name:    "empty consul: register everything",
			desired: append([]*api.AgentServiceRegistration{agent}, prod3...),
			current: current(),
			owned:   map[ClusterKey]bool{key: true},
			wantReg: append([]string{agent.ID}, ids(prod3)...),
		},
		{
			name:    "in sync: nothing",
			desired: append([]*api.AgentServiceRegistration{agent}, prod3...),
			current: current(append([]*api.AgentServiceRegistration{agent}, prod3...)...),
			owned:   map[ClusterKey]bool{key: true},
		},
		{
			name:    "scale down deregisters the missing broker",
			desired: append([]*api.AgentServiceRegistration{agent}, prod2...),
			current: current(append([]*api.AgentServiceRegistration{agent}, prod3...)...),
			owned:   map[ClusterKey]bool{key: true},
			wantDe:  []string{"magnetar:acme:prod:b2"},
		},
		{
			name:    "unknown cluster left alone",
			desired: []*api.AgentServiceRegistration{agent},
			current: current(append([]*api.AgentServiceRegistration{agent}, other...)...),
		},
		{
			name:    "deleted cluster deregistered",
			desired: []*api.AgentServiceRegistration{agent},
			current: current(append([]*api.AgentServiceRegistration{agent}, prod2...)...),
			deleted: map[ClusterKey]bool{key: true},
			wantDe:  ids(prod2),
		},
		{
			name:    "changed port re-registered",
			desired: moved,
			current: current(prod2...),
			owned:   map[ClusterKey]bool{key: true},
			wantReg: []string{"magnetar:acme:prod:b0"},
			wantDe:  []string{"magnetar:acme:prod:b1"},
		},
		{
			name:    "tag order does not matter",
			desired: prod2[:1],
			current: func() map[string]*api.AgentService {
				m := current(prod2[:1]...)
				slices.Reverse(m[prod2[0].ID].Tags)
				return m
			}(),
			owned: map[ClusterKey]bool{key: true},
		},
		{
			name:    "missing check forces registration",
			desired: prod2,
			current: current(prod2...),
			owned:   map[ClusterKey]bool{key: true},
			force:   map[string]bool{prod2[1].ID: true},
			wantReg: []string{prod2[1].ID},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := makePlan(tc.desired, tc.current, tc.owned, tc.deleted, tc.force)
			if got := ids(p.register); !slices.Equal(got, tc.wantReg) {
				t.Errorf("register %v, want %v", got, tc.wantReg)
			}
			if !slices.Equal(p.deregister, tc.wantDe) {
				t.Errorf("deregister %v, want %v", p.deregister, tc.wantDe)
			}
		})
	}
}

func TestClusterStatus(t *testing.T) {
	b := func(ss ...Status) []BrokerView {
		var out []BrokerView
		for _, s := range ss {
			out = append(out, BrokerView{Status: s})
		}
		return out
	}
	for _, tc := range []struct {
		brokers []BrokerView
		want    Status
	}{
		{b(StatusPassing, StatusPassing), StatusPassing},
		{b(StatusPassing, StatusCritical), StatusWarning},
		{b(StatusWarning), StatusWarning},
		{b(StatusCritical, StatusCritical), StatusCritical},
		{b(StatusCritical, StatusWarning), StatusWarning},
		{b("maintenance"), StatusCritical},
		{nil, StatusCritical},
	} {
		if got := clusterStatus(tc.brokers); got != tc.want {
			t.Errorf("clusterStatus(%v) = %s, want %s", tc.brokers, got, tc.want)
		}
	}
}

func TestBuildViewAndEvents(t *testing.T) {
	entry := func(svc, id string, tags []string, meta map[string]string, status string) *api.ServiceEntry {
		return &api.ServiceEntry{
			Node:    &api.Node{Node: "n1", Address: "10.0.0.1"},
			Service: &api.AgentService{ID: id, Service: svc, Tags: tags, Meta: meta, Port: 6650},
			Checks: api.HealthChecks{
				{CheckID: "serfHealth", Status: api.HealthPassing},
				{CheckID: checkID(id), Status: status, Output: "measured " + status},
			},
		}
	}
	regs := brokerRegistrations("eu", Cluster{Org: "acme", Name: "prod", Brokers: []Broker{{ID: "b0", Address: "a", Port: 1}, {ID: "b1", Address: "b", Port: 2}}}, "30s")
	ag := agentRegistration("eu", "", 0, "30s")
	entries := []*api.ServiceEntry{
		entry(ag.Name, ag.ID, ag.Tags, ag.Meta, api.HealthPassing),
		entry(regs[0].Name, regs[0].ID, regs[0].Tags, regs[0].Meta, api.HealthPassing),
		entry(regs[1].Name, regs[1].ID, regs[1].Tags, regs[1].Meta, api.HealthCritical),
	}
	clusters, regions := buildView("dc1", entries)
	if len(regions) != 1 || regions[0].Region != "eu" || regions[0].Address != "10.0.0.1" || regions[0].Status != StatusPassing {
		t.Errorf("regions = %+v", regions)
	}
	k := ClusterKey{"acme", "prod"}
	cv := clusters[k]
	if cv.Status != StatusWarning || len(cv.Brokers) != 2 || cv.Region != "eu" || cv.Brokers[1].Output != "measured critical" {
		t.Errorf("cluster = %+v", cv)
	}

	at := time.Unix(0, 0)
	ev := clusterEvents("dc1", nil, clusters, at)
	if len(ev) != 1 || ev[0].From != "" || ev[0].To != StatusWarning {
		t.Errorf("first events = %+v", ev)
	}
	if ev := clusterEvents("dc1", clusters, clusters, at); len(ev) != 0 {
		t.Errorf("no change gave %+v", ev)
	}
	down := map[ClusterKey]ClusterView{k: {Org: "acme", Name: "prod", Status: StatusCritical}}
	if ev := clusterEvents("dc1", clusters, down, at); len(ev) != 1 || ev[0].From != StatusWarning || ev[0].To != StatusCritical {
		t.Errorf("change events = %+v", ev)
	}
	if ev := clusterEvents("dc1", clusters, nil, at); len(ev) != 1 || !ev[0].Removed || ev[0].To != "" {
		t.Errorf("removal events = %+v", ev)
	}
}

func TestACLError(t *testing.T) {
	c := &client{tokenFrom: "$CONSUL_HTTP_TOKEN"}
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{api.StatusError{Code: 403, Body: "ACL not found"}, []string{"does not know the ACL token", "$CONSUL_HTTP_TOKEN", `service:write on "acme"`, "403 ACL not found"}},
		{api.StatusError{Code: 403, Body: `Permission denied: token with AccessorID 'x' lacks permission 'service:write' on "acme"`}, []string{"lacks service:write", "Permission denied"}},
		{fmt.Errorf("Unexpected response code: 403 (Permission denied)"), []string{"lacks service:write", "403 Permission denied"}},
	} {
		err := c.wrap(tc.err, "register magnetar:acme:prod:b0", `service:write on "acme"`)
		var ae *ACLError
		if !errors.Is(err, ErrACL) || !errors.As(err, &ae) {
			t.Fatalf("wrap(%v) = %v, not an ACL error", tc.err, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q lacks %q", err, w)
			}
		}
	}
	if err := c.wrap(api.StatusError{Code: 500, Body: "boom"}, "x", "y"); errors.Is(err, ErrACL) {
		t.Errorf("500 is an ACL error: %v", err)
	}
	if !checkGone(api.StatusError{Code: 404, Body: `Unknown check ID "x"`}) || !checkGone(api.StatusError{Code: 500, Body: `CheckID "x" does not have associated TTL`}) {
		t.Error("checkGone misses a missing check")
	}
}

func TestBackoff(t *testing.T) {
	prev := time.Duration(0)
	for n := 1; n <= 10; n++ {
		d := backoff(n, time.Second, 30*time.Second)
		if d > 30*time.Second || d < 800*time.Millisecond {
			t.Errorf("backoff(%d) = %s", n, d)
		}
		if n <= 4 && d <= prev*8/10 {
			t.Errorf("backoff(%d) = %s does not grow from %s", n, d, prev)
		}
		prev = d
	}
}

func TestConfigEnvAndFlags(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "10.0.0.1:8500")
	t.Setenv("CONSUL_HTTP_TOKEN", "env-token")
	t.Setenv("CONSUL_CACERT", "/env/ca.pem")
	var c Config
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	c.AddFlags(fs)
	if strings.Contains(fs.FlagUsages(), "env-token") {
		t.Error("help shows the token")
	}
	ac := c.apiConfig()
	if ac.Address != "10.0.0.1:8500" || ac.Token != "env-token" || ac.TLSConfig.CAFile != "/env/ca.pem" {
		t.Errorf("from env: %+v", ac)
	}
	if got := c.tokenSource(); got != "$CONSUL_HTTP_TOKEN" {
		t.Errorf("token source %q", got)
	}
	if err := fs.Parse([]string{"--consul-http-addr", "https://consul:8501", "--consul-token", "flag-token", "--consul-datacenter", "eu"}); err != nil {
		t.Fatal(err)
	}
	ac = c.apiConfig()
	if ac.Address != "https://consul:8501" || ac.Token != "flag-token" || c.Datacenter != "eu" {
		t.Errorf("flags: %+v", ac)
	}
	if got := c.tokenSource(); got != "--consul-token" {
		t.Errorf("token source %q", got)
	}
	if err := (Config{ClientCert: "/c.pem"}).Validate(); err == nil {
		t.Error("a certificate without its key validates")
	}
}
