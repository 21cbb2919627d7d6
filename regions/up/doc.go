// Package up is `magnetar up`: a whole managed service on one machine for
// development. It runs, under one data directory, the control plane
// (SQLite store, OPA policy) in its own process and one region agent per
// region with the process provisioner, and registers the regions with the
// bootstrap operator key. The agents run in this process, or, with
// Config.AgentProcesses, each as a `magnetar agent` child process that up
// supervises (agentproc.go): a region can then be lost as a whole (its agent
// and its clusters killed) while the control plane and the other regions
// go on. Every agent serves the failover endpoint on a port of its own. A
// control plane without price books gets the development one
// (pricebook.go), so invoices can be read at once. With Config.Discovery
// "consul" it also runs a Consul dev agent per region, each region its own
// datacenter, WAN-joined (or uses the Consul agent given), registers the
// regions' clusters there and has the control plane watch it (consul.go).
//
// Layout of DataDir:
//
//	controlplane.db          the control plane's SQLite store
//	bootstrap.key            the operator API key (written on the first start)
//	regions/<id>/            the process provisioner of region <id>
//	                         (clusters/<org>-<cluster>/..., see regions/provisioner/process)
//	regions/<id>/failover.addr   the agent's failover endpoint (host:port) while it runs
//	regions/<id>/agent.pid, agent.log   the agent process (AgentProcesses)
//	consul/<id>/             the Consul dev agent of region <id> with Discovery "consul"
//	                         (consul.pid, consul.log, http.addr, dns.addr; consul.go)
//
// Unlike `magnetar agent`, `up` is a development command: Shutdown stops
// every data-plane process it runs, keeping their data; the next start
// brings the clusters back. An agent process a SIGKILLed up left behind is
// stopped by the next start before it starts its own.
//
// Callers: cmd/magnetar/up.go and tests. Concurrency: Start returns a
// running Env; its goroutines (the API server, the agents or their
// supervisors) are owned by the Env and stopped and waited for by Shutdown.
package up
