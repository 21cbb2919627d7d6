package apiserver

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
)

// Service discovery (Config.Discovery): with a Consul catalog watch the
// control plane
//   - adds each region's registration to the Region resource it returns
//     (Region.consul: its agent's check, its clusters, whether the view is
//     stale), read from the watcher's view on every Get and List, never
//     stored;
//   - takes Consul's health of a replication group's member cluster as a
//     second input of the replication monitor's health check (replmonitor.go,
//     consulVerdict): a member whose brokers' checks are all critical in a
//     datacenter the watcher read on its last attempt fails its health
//     check, exactly as if its Pulsar port did not answer, so automatic
//     failover, its runbook record, RTO and RPO are the same. A stale view
//     is no verdict: a Consul outage never fails a cluster over.

// Discovery is a catalog of the regions and clusters; *consul.Watcher
// implements it.
type Discovery interface {
	View() consul.View
}

var _ Discovery = (*consul.Watcher)(nil)

// fillConsul sets r.Consul from the discovery view (nothing without one).
func (s *Server) fillConsul(regions ...*cpv1.Region) {
	if s.cfg.Discovery == nil {
		return
	}
	v := s.cfg.Discovery.View()
	for _, r := range regions {
		if r != nil {
			r.Consul = regionConsul(v, strings.TrimPrefix(r.Name, "regions/"))
		}
	}
}

// regionConsul is region's part of v.
func regionConsul(v consul.View, region string) *cpv1.RegionConsul {
	out := &cpv1.RegionConsul{Stale: v.Stale, Error: v.Err}
	if !v.LastRefresh.IsZero() {
		out.LastRefresh = timestamppb.New(v.LastRefresh)
	}
	rv, ok := v.Region(region)
	if !ok {
		return out
	}
	out.Datacenter, out.Health, out.Output = rv.Datacenter, string(rv.Status), rv.Output
	if dv, ok := v.Datacenter(rv.Datacenter); ok {
		out.Stale, out.Error = dv.Stale || v.Err != "", dv.Err
		if v.Err != "" {
			out.Error = v.Err
		}
		out.LastRefresh = nil
		if !dv.LastRefresh.IsZero() {
			out.LastRefresh = timestamppb.New(dv.LastRefresh)
		}
	}
	for _, c := range v.Clusters {
		if c.Region == region && c.Datacenter == rv.Datacenter {
			out.Clusters++
			if c.Status == consul.StatusPassing {
				out.ClustersPassing++
			}
		}
	}
	return out
}

// consulVerdict says whether Consul holds cluster (a resource name) as
// failing: every broker critical in a datacenter read on the watcher's
// last attempt. A cluster Consul does not list, or lists from a stale
// datacenter, gets no verdict.
func (s *Server) consulVerdict(cluster string) (failing bool, why string) {
	if s.cfg.Discovery == nil {
		return false, ""
	}
	p := strings.Split(cluster, "/")
	if len(p) != 4 {
		return false, ""
	}
	v := s.cfg.Discovery.View()
	for _, c := range v.Clusters {
		if c.Org != p[1] || c.Name != p[3] {
			continue
		}
		if dv, ok := v.Datacenter(c.Datacenter); !ok || dv.Stale {
			continue
		}
		if c.Status == consul.StatusCritical {
			out := ""
			if len(c.Brokers) > 0 {
				out = ": " + c.Brokers[0].Output
			}
			return true, fmt.Sprintf("consul: every broker's check is critical in datacenter %s%s", c.Datacenter, out)
		}
	}
	return false, ""
}
