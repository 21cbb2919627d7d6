package up

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul/consultest"
)

// TestUpConsul: with Discovery "consul" up runs a Consul dev agent per
// region, WAN-joined; the in-process agents register in their region's
// datacenter and the control plane shows both regions' Consul health; an
// agent process would get the same settings as flags.
func TestUpConsul(t *testing.T) {
	bin := consultest.Require(t)
	env, err := Start(t.Context(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Regions: []string{"ra", "rb"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Discovery: "consul", ConsulBinary: bin,
		ConsulCheckInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := env.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		for _, a := range env.consul {
			select {
			case <-a.exited:
			default:
				t.Errorf("consul of %s still running after Shutdown", a.dc)
			}
		}
	})
	agents := env.ConsulAgents()
	if len(agents) != 2 || agents[0].Datacenter != "ra" || agents[1].Datacenter != "rb" || agents[0].HTTPAddr == agents[1].HTTPAddr {
		t.Fatalf("consul agents %+v", agents)
	}
	if dcs, err := env.consul[1].client.Catalog().Datacenters(); err != nil || !slices.Equal(dcs, []string{"ra", "rb"}) && !slices.Equal(dcs, []string{"rb", "ra"}) {
		t.Fatalf("rb's consul lists datacenters %v (%v)", dcs, err)
	}
	args := strings.Join(env.agentArgs("rb", "/unused"), " ")
	if !strings.Contains(args, "--discovery consul --consul-http-addr "+agents[1].HTTPAddr+" --consul-datacenter rb") ||
		!strings.Contains(args, "--consul-check-interval 200ms") {
		t.Fatalf("agent process args: %s", args)
	}

	b, err := os.ReadFile(env.KeyFile())
	if err != nil {
		t.Fatal(err)
	}
	raw := strings.TrimSpace(string(b))
	conn, err := grpc.NewClient(env.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+raw)
	regions := cpv1.NewRegionsClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range []string{"ra", "rb"} {
		for {
			reg, err := regions.GetRegion(ctx, &cpv1.GetRegionRequest{Name: "regions/" + r})
			c := reg.GetConsul()
			if err == nil && c.GetDatacenter() == r && c.GetHealth() == "passing" && !c.GetStale() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("region %s's consul health: %v %v", r, c, err)
			}
			time.Sleep(50 * time.Millisecond) // polling the catalog watch
		}
	}
}

func TestValidateDiscovery(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", "static", ""}, {"static", "static", ""}, {"consul", "consul", ""}, {"dns", "", "want static or consul"},
	} {
		c := Config{Discovery: tc.in}
		err := c.Validate()
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) || err == nil && c.Discovery != tc.want {
			t.Errorf("Discovery %q: %q, %v", tc.in, c.Discovery, err)
		}
	}
}
