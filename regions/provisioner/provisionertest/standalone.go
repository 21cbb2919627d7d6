package provisionertest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/standalone"
	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
)

// Standalones is a Provisioner for tests of what runs on top of a data
// plane (region agents, the CLI): each cluster is an in-process standalone
// (one broker, one bookie, embedded metadata) on free loopback ports,
// READY as soon as Apply returns, whatever size was asked. Every cluster
// left is shut down when the test ends.
type Standalones struct {
	t        *testing.T
	mu       sync.Mutex
	clusters map[string]*standalone.Standalone
	badAdmin string
}

var _ provisioner.Provisioner = (*Standalones)(nil)

// NewStandalones returns a provisioner of in-process standalones.
func NewStandalones(t *testing.T) *Standalones {
	p := &Standalones{t: t, clusters: map[string]*standalone.Standalone{}}
	t.Cleanup(func() {
		names, _ := p.List(context.Background())
		for _, n := range names {
			if err := p.Delete(context.Background(), n); err != nil {
				t.Errorf("delete %s: %v", n, err)
			}
		}
	})
	return p
}

// SetBadAdmin makes Status and Apply report url as every cluster's admin
// URL ("" restores the real one), to make the admin API unreachable.
func (p *Standalones) SetBadAdmin(url string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.badAdmin = url
}

// Standalone returns the standalone of cluster name, nil if there is none.
func (p *Standalones) Standalone(name string) *standalone.Standalone {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clusters[name]
}

func (p *Standalones) statusLocked(name string) (provisioner.ClusterStatus, error) {
	s := p.clusters[name]
	if s == nil {
		return provisioner.ClusterStatus{}, provisioner.ErrNotFound
	}
	st := provisioner.ClusterStatus{Name: name, State: provisioner.StateReady, ServiceURL: s.ServiceURL(),
		AdminURL: s.WebServiceURL(), Size: provisioner.Size{Brokers: 1, Bookies: 1}}
	if p.badAdmin != "" {
		st.AdminURL = p.badAdmin
	}
	return st, nil
}

// Apply starts the cluster's standalone unless it runs.
func (p *Standalones) Apply(ctx context.Context, spec provisioner.ClusterSpec) (provisioner.ClusterStatus, error) {
	if err := spec.Validate(); err != nil {
		return provisioner.ClusterStatus{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clusters[spec.Name] == nil {
		s, err := standalone.Start(ctx, standalonetest.Config(p.t.TempDir(), standalonetest.FreeAddr(p.t)))
		if err != nil {
			return provisioner.ClusterStatus{}, err
		}
		p.clusters[spec.Name] = s
	}
	return p.statusLocked(spec.Name)
}

// Status reports a running cluster as READY.
func (p *Standalones) Status(_ context.Context, name string) (provisioner.ClusterStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statusLocked(name)
}

// Delete shuts the cluster's standalone down.
func (p *Standalones) Delete(ctx context.Context, name string) error {
	p.mu.Lock()
	s := p.clusters[name]
	delete(p.clusters, name)
	p.mu.Unlock()
	if s == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// List names the running clusters.
func (p *Standalones) List(context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for n := range p.clusters {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}
