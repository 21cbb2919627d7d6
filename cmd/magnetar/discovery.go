package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-dev/magnetar/regions/discovery/consul"
)

// discoveryFlags are --discovery and the --consul-* flags of the agent,
// the control plane and up (docs/consul.md).
type discoveryFlags struct {
	mode     string
	consul   consul.Config
	interval time.Duration
	ttl      time.Duration
}

const discoveryHelp = "service discovery: static (regions and clusters known from the control plane only) or consul (regions are Consul datacenters; agents register themselves and their clusters' brokers, the control plane watches the WAN-federated catalog; see --consul-* and CONSUL_HTTP_ADDR / CONSUL_HTTP_TOKEN)"

// add binds the flags; checks adds the registrar's check timing (agents).
func (d *discoveryFlags) add(f *pflag.FlagSet, checks bool) {
	f.StringVar(&d.mode, "discovery", "static", discoveryHelp)
	d.consul.AddFlags(f)
	if checks {
		f.DurationVar(&d.interval, "consul-check-interval", consul.DefaultInterval, "how often the agent measures its brokers and renews their Consul TTL checks")
		f.DurationVar(&d.ttl, "consul-check-ttl", consul.DefaultTTL, "TTL of the Consul checks: how long after the agent's last renewal (the agent down) its brokers turn critical; keep it above an agent restart")
	}
}

// enabled validates --discovery and reports whether it is consul.
func (d *discoveryFlags) enabled() (bool, error) {
	switch d.mode {
	case "", "static":
		return false, nil
	case "consul":
		return true, d.consul.Validate()
	default:
		return false, fmt.Errorf("--discovery %q: want static or consul", d.mode)
	}
}

// registrar is the agent's registrar config (nil with static discovery).
func (d *discoveryFlags) registrar() (*consul.RegistrarConfig, error) {
	on, err := d.enabled()
	if err != nil || !on {
		return nil, err
	}
	return &consul.RegistrarConfig{Consul: d.consul, Interval: d.interval, TTL: d.ttl}, nil
}
