package consul

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"
)

// AgentService is the service name region agents register under.
const AgentService = "magnetar-agent"

// Tags marking Magnetar's instances. They hold "=", which no DNS label
// holds, so no cluster's DNS tag can equal them.
const (
	TagAgent  = "magnetar=agent"
	TagBroker = "magnetar=broker"
)

// Prefixes of the key=value tags every instance carries.
const (
	tagOrg     = "org="
	tagCluster = "cluster="
	tagRegion  = "region="
)

// Meta keys of an instance (Consul allows letters, digits, "-" and "_").
const (
	MetaOrg           = "org"
	MetaCluster       = "cluster"
	MetaRegion        = "region"
	MetaBroker        = "broker"
	MetaPulsarURL     = "pulsar_url"
	MetaPulsarTLSURL  = "pulsar_ssl_url"
	MetaAdminURL      = "admin_url"
	MetaAdminTLSURL   = "admin_tls_url"
	MetaServiceURL    = "service_url"
	MetaServiceTLSURL = "service_ssl_url"
)

// ErrReservedName is returned for an organization whose name is a service
// name Magnetar or Consul itself uses.
var ErrReservedName = errors.New("consul: organization name is a reserved Consul service name")

// ErrInvalid is wrapped by SetCluster for a cluster it cannot register.
var ErrInvalid = errors.New("consul: invalid cluster")

// reserved are service names an organization may not take.
var reserved = map[string]bool{"consul": true, AgentService: true}

// dnsLabel is what Consul DNS resolves as one label.
var dnsLabel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// idPart is what a name may hold to be part of a service or check ID:
// ":" separates the parts and "/" would split the agent API's paths.
var idPart = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Status is a Consul health status: passing, warning or critical.
type Status string

const (
	StatusPassing  Status = api.HealthPassing
	StatusWarning  Status = api.HealthWarning
	StatusCritical Status = api.HealthCritical
)

// Cluster is a data-plane cluster as the region agent registers it.
type Cluster struct {
	// Org and Name are the organization and cluster IDs; the service name
	// is Org and the DNS tag is Name.
	Org, Name string
	// ServiceURL and TLSServiceURL list every broker
	// ("pulsar://h:p,h:p", "pulsar+ssl://h:p,h:p"; the latter may be empty).
	ServiceURL, TLSServiceURL string
	// Brokers are registered one instance each.
	Brokers []Broker
}

// Broker is one broker of a cluster.
type Broker struct {
	// ID names the broker within its cluster ("broker-0"): letters,
	// digits, ".", "_" and "-".
	ID string
	// PulsarURL is the broker's own pulsar://host:port; PulsarTLSURL,
	// AdminURL and AdminTLSURL its pulsar+ssl:// and admin http(s) URLs
	// ("" when it has none).
	PulsarURL, PulsarTLSURL, AdminURL, AdminTLSURL string
	// Address and Port are what Consul DNS answers (A and SRV records);
	// empty and 0: the host and port of PulsarURL.
	Address string
	Port    int
}

// ClusterKey identifies a cluster.
type ClusterKey struct{ Org, Name string }

func (k ClusterKey) String() string { return k.Org + "/" + k.Name }

// Key returns the cluster's key.
func (c Cluster) Key() ClusterKey { return ClusterKey{c.Org, c.Name} }

// DNSName returns the name Consul DNS resolves to the brokers of cluster
// of org in datacenter dc under domain ("" means "consul").
func DNSName(org, cluster, dc, domain string) string {
	if domain == "" {
		domain = "consul"
	}
	return cluster + "." + org + ".service." + dc + "." + strings.TrimSuffix(domain, ".")
}

// DNSResolvable reports whether DNSName resolves for these names.
func DNSResolvable(org, cluster string) bool {
	return dnsLabel.MatchString(org) && dnsLabel.MatchString(cluster)
}

// agentServiceID is the region agent's service ID.
func agentServiceID(region string) string { return AgentService + ":" + region }

// brokerServiceID is a broker instance's service ID.
func brokerServiceID(org, cluster, broker string) string {
	return "magnetar:" + org + ":" + cluster + ":" + broker
}

// checkID is the TTL check of a service ID.
func checkID(serviceID string) string { return serviceID + ":ttl" }

// normalize validates c and fills each broker's Address and Port from its
// PulsarURL.
func (c Cluster) normalize() (Cluster, error) {
	if !idPart.MatchString(c.Org) || !idPart.MatchString(c.Name) {
		return c, fmt.Errorf("%w %q/%q: organization and cluster names must be 1-128 letters, digits, '.', '_' or '-'", ErrInvalid, c.Org, c.Name)
	}
	if reserved[c.Org] {
		return c, fmt.Errorf("%w: %q", ErrReservedName, c.Org)
	}
	out := c
	out.Brokers = make([]Broker, len(c.Brokers))
	seen := map[string]bool{}
	for i, b := range c.Brokers {
		if !idPart.MatchString(b.ID) {
			return c, fmt.Errorf("%w %s: broker ID %q must be 1-128 letters, digits, '.', '_' or '-'", ErrInvalid, c.Key(), b.ID)
		}
		if seen[b.ID] {
			return c, fmt.Errorf("%w %s: broker ID %q twice", ErrInvalid, c.Key(), b.ID)
		}
		seen[b.ID] = true
		if b.Address == "" || b.Port == 0 {
			host, port, err := hostPort(b.PulsarURL)
			if err != nil {
				return c, fmt.Errorf("%w %s: broker %s: %v", ErrInvalid, c.Key(), b.ID, err)
			}
			if b.Address == "" {
				b.Address = host
			}
			if b.Port == 0 {
				b.Port = port
			}
		}
		if b.Port <= 0 || b.Port > 65535 {
			return c, fmt.Errorf("%w %s: broker %s: port %d", ErrInvalid, c.Key(), b.ID, b.Port)
		}
		out.Brokers[i] = b
	}
	return out, nil
}

// hostPort returns the host and port of a pulsar://host:port URL.
func hostPort(raw string) (string, int, error) {
	if raw == "" {
		return "", 0, errors.New("no address, port or Pulsar URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", 0, fmt.Errorf("Pulsar URL: %w", err)
	}
	host, ps, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", 0, fmt.Errorf("Pulsar URL %q: %w", raw, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		return "", 0, fmt.Errorf("Pulsar URL %q: port: %w", raw, err)
	}
	return host, port, nil
}

// agentRegistration is the region agent's own service.
func agentRegistration(region, address string, port int, ttl string) *api.AgentServiceRegistration {
	id := agentServiceID(region)
	return &api.AgentServiceRegistration{
		ID:      id,
		Name:    AgentService,
		Tags:    []string{TagAgent, tagRegion + region},
		Address: address,
		Port:    port,
		Meta:    map[string]string{MetaRegion: region},
		Check: &api.AgentServiceCheck{
			CheckID: checkID(id),
			Name:    "region agent " + region,
			TTL:     ttl,
			Status:  api.HealthPassing,
		},
	}
}

// brokerRegistrations are a normalized cluster's instances, one per broker.
func brokerRegistrations(region string, c Cluster, ttl string) []*api.AgentServiceRegistration {
	out := make([]*api.AgentServiceRegistration, 0, len(c.Brokers))
	for _, b := range c.Brokers {
		id := brokerServiceID(c.Org, c.Name, b.ID)
		meta := map[string]string{
			MetaOrg: c.Org, MetaCluster: c.Name, MetaRegion: region, MetaBroker: b.ID,
		}
		for k, v := range map[string]string{
			MetaPulsarURL: b.PulsarURL, MetaPulsarTLSURL: b.PulsarTLSURL,
			MetaAdminURL: b.AdminURL, MetaAdminTLSURL: b.AdminTLSURL,
			MetaServiceURL: c.ServiceURL, MetaServiceTLSURL: c.TLSServiceURL,
		} {
			if v != "" {
				meta[k] = v
			}
		}
		out = append(out, &api.AgentServiceRegistration{
			ID:      id,
			Name:    c.Org,
			Tags:    []string{c.Name, TagBroker, tagOrg + c.Org, tagCluster + c.Name, tagRegion + region},
			Address: b.Address,
			Port:    b.Port,
			Meta:    meta,
			Check: &api.AgentServiceCheck{
				CheckID: checkID(id),
				Name:    "broker " + b.ID + " of " + c.Org + "/" + c.Name,
				TTL:     ttl,
				Status:  api.HealthCritical,
			},
		})
	}
	return out
}

// tagValue returns the value of the first "prefix..." tag.
func tagValue(tags []string, prefix string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, prefix); ok {
			return v
		}
	}
	return ""
}
