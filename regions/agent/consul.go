package agent

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// Consul registration (Config.Consul): the agent keeps a consul.Registrar
// holding itself and every cluster it runs.
//
//   - A cluster is set (registered, or its brokers' URLs updated) each time
//     the provisioner reports it READY; a cluster that is progressing or
//     failed keeps its last registration, and its checks say how it is.
//   - A cluster is deleted from Consul only when the agent has torn its
//     data plane down because the control plane deleted it. Nothing else
//     deregisters: not a Consul outage, not an agent restart (the
//     registrar only removes what it was told to), not a cluster that
//     fails.
//   - The checks are the provisioner's own measurement, taken again on
//     every registrar pass (Status: the broker's process is alive and
//     answers GET /admin/v2/brokers/health), so a broker that hangs turns
//     critical within an interval even while its port accepts connections.
//
// Consul being down changes nothing in the agent: the registrar retries in
// its own goroutine and the reconcile loop never waits on it.

// consulRegion is the region's name in Consul: its bare id.
func consulRegion(region string) string { return strings.TrimPrefix(region, "regions/") }

// consulKey splits "organizations/{org}/clusters/{cluster}".
func consulKey(name string) (org, cluster string, ok bool) {
	p := strings.Split(name, "/")
	if len(p) != 4 || p[0] != "organizations" || p[2] != "clusters" {
		return "", "", false
	}
	return p[1], p[3], true
}

// newRegistrar builds the registrar of cfg.Consul; the agent's own service
// advertises the failover endpoint when there is one.
func (a *Agent) newRegistrar(failoverAddr string) (*consul.Registrar, error) {
	rc := *a.cfg.Consul
	rc.Region = consulRegion(a.cfg.Region)
	rc.Health = a.consulHealth
	if rc.Logger == nil {
		rc.Logger = a.cfg.Logger
	}
	if failoverAddr != "" {
		if host, port, err := net.SplitHostPort(failoverAddr); err == nil {
			rc.AgentAddress = host
			rc.AgentPort, _ = strconv.Atoi(port)
		}
	}
	r, err := consul.NewRegistrar(rc)
	if err != nil {
		return nil, fmt.Errorf("agent: consul: %w", err)
	}
	return r, nil
}

// consulSet registers a ready cluster (a no-op when nothing changed).
func (a *Agent) consulSet(name string, st provisioner.ClusterStatus) {
	if a.registrar == nil {
		return
	}
	c, ok := consulCluster(name, st)
	if !ok {
		return
	}
	if err := a.registrar.SetCluster(c); err != nil {
		a.log.Warn("agent: cluster not registered in consul", "cluster", name, "err", err)
	}
}

// consulDelete deregisters a cluster whose data plane was deleted.
func (a *Agent) consulDelete(name string) {
	if a.registrar == nil {
		return
	}
	if org, cl, ok := consulKey(name); ok {
		a.registrar.DeleteCluster(org, cl)
	}
}

// consulCluster is what Consul is told of a ready cluster: one instance per
// broker, named broker-<index>.
func consulCluster(name string, st provisioner.ClusterStatus) (consul.Cluster, bool) {
	org, cl, ok := consulKey(name)
	if !ok || st.ServiceURL == "" {
		return consul.Cluster{}, false
	}
	plain, tls := urlHosts(st.ServiceURL), urlHosts(st.TLSServiceURL)
	c := consul.Cluster{Org: org, Name: cl, ServiceURL: st.ServiceURL, TLSServiceURL: st.TLSServiceURL}
	i := 0
	for _, p := range st.Processes {
		if p.Role != "broker" {
			continue
		}
		b := consul.Broker{ID: "broker-" + strconv.Itoa(p.Index)}
		switch {
		case p.Addr != "":
			b.PulsarURL = "pulsar://" + p.Addr
		case i < len(plain):
			b.PulsarURL = "pulsar://" + plain[i]
		}
		if i < len(tls) {
			b.PulsarTLSURL = "pulsar+ssl://" + tls[i]
		}
		if p.HTTPAddr != "" {
			b.AdminURL = "http://" + p.HTTPAddr
		}
		if p.HTTPSAddr != "" {
			b.AdminTLSURL = "https://" + p.HTTPSAddr
		}
		if b.PulsarURL != "" {
			c.Brokers = append(c.Brokers, b)
		}
		i++
	}
	if len(c.Brokers) == 0 { // a provisioner without processes: the URL's hosts
		for i, h := range plain {
			b := consul.Broker{ID: "broker-" + strconv.Itoa(i), PulsarURL: "pulsar://" + h}
			if i < len(tls) {
				b.PulsarTLSURL = "pulsar+ssl://" + tls[i]
			}
			if i == 0 {
				b.AdminURL = st.AdminURL
				b.AdminTLSURL = st.TLSAdminURL
			}
			c.Brokers = append(c.Brokers, b)
		}
	}
	return c, len(c.Brokers) > 0
}

// urlHosts returns the host:port list of "scheme://h:p,h:p".
func urlHosts(u string) []string {
	_, rest, ok := strings.Cut(u, "://")
	if !ok || rest == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(rest, "/"), ",")
}

// consulHealth is the registrar's HealthFunc: the provisioner's status of
// the cluster, broker by broker.
func (a *Agent) consulHealth(ctx context.Context, c consul.Cluster) map[string]consul.Check {
	name := "organizations/" + c.Org + "/clusters/" + c.Name
	st, err := a.prov.Status(ctx, name)
	out := make(map[string]consul.Check, len(c.Brokers))
	if err != nil {
		for _, b := range c.Brokers {
			out[b.ID] = consul.Check{Status: consul.StatusCritical, Output: "region agent: " + err.Error()}
		}
		return out
	}
	return brokerChecks(st, c)
}

// brokerChecks rates each registered broker from a provisioner status.
func brokerChecks(st provisioner.ClusterStatus, c consul.Cluster) map[string]consul.Check {
	out := make(map[string]consul.Check, len(c.Brokers))
	brokers := 0
	for _, p := range st.Processes {
		if p.Role != "broker" {
			continue
		}
		brokers++
		id := "broker-" + strconv.Itoa(p.Index)
		switch {
		case p.Healthy:
			out[id] = consul.Check{Status: consul.StatusPassing, Output: "broker health check passed (GET /admin/v2/brokers/health)"}
		case p.Alive:
			out[id] = consul.Check{Status: consul.StatusCritical, Output: "broker process running but failing its health check" + suffix(p.Message)}
		default:
			out[id] = consul.Check{Status: consul.StatusCritical, Output: "broker process not running" + suffix(p.Message)}
		}
	}
	if brokers == 0 { // a provisioner without processes: the cluster's state
		chk := consul.Check{Status: consul.StatusPassing, Output: "cluster ready"}
		if st.State != provisioner.StateReady {
			chk = consul.Check{Status: consul.StatusCritical, Output: "cluster " + strings.ToLower(string(st.State)) + suffix(st.Message)}
		}
		for _, b := range c.Brokers {
			out[b.ID] = chk
		}
	}
	return out
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}
