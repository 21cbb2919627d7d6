package provisioner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
)

// Memory is an in-memory Provisioner for tests of the agent: Apply makes a
// cluster READY at once with made-up URLs (plain and TLS, with the
// certificate of a CA made by NewMemory), unless a failure was injected
// with FailApply. It counts Apply and Delete calls per cluster.
type Memory struct {
	caPEM    string
	mu       sync.Mutex
	clusters map[string]ClusterStatus
	fail     map[string]string // cluster -> message of an injected failure
	applies  map[string]int
	changes  map[string]int
	deletes  map[string]int
}

var _ Provisioner = (*Memory)(nil)

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	ca, err := pki.Create("memory provisioner CA", 24*time.Hour)
	if err != nil {
		panic(err) // the system's random source failed
	}
	return &Memory{
		caPEM:    string(ca.CertPEM),
		clusters: map[string]ClusterStatus{}, fail: map[string]string{},
		applies: map[string]int{}, changes: map[string]int{}, deletes: map[string]int{},
	}
}

// Apply records spec; the cluster is READY unless FailApply set a failure.
func (m *Memory) Apply(ctx context.Context, spec ClusterSpec) (ClusterStatus, error) {
	if err := ctx.Err(); err != nil {
		return ClusterStatus{}, err
	}
	if err := spec.Validate(); err != nil {
		return ClusterStatus{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applies[spec.Name]++
	old, existed := m.clusters[spec.Name]
	if !existed || old.Size != spec.Size {
		m.changes[spec.Name]++
	}
	hosts := make([]string, spec.Size.Brokers)
	tlsHosts := make([]string, spec.Size.Brokers)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("broker-%d.memory.invalid:6650", i)
		tlsHosts[i] = fmt.Sprintf("broker-%d.memory.invalid:6651", i)
	}
	st := ClusterStatus{Name: spec.Name, State: StateReady, Size: spec.Size, Revision: spec.Revision,
		ServiceURL: "pulsar://" + strings.Join(hosts, ","), AdminURL: "http://broker-0.memory.invalid:8080",
		TLSServiceURL: "pulsar+ssl://" + strings.Join(tlsHosts, ","), TLSAdminURL: "https://broker-0.memory.invalid:8443",
		CACertPEM: m.caPEM}
	if msg, ok := m.fail[spec.Name]; ok {
		st.State, st.Message, st.ServiceURL, st.AdminURL = StateFailed, msg, "", ""
		st.TLSServiceURL, st.TLSAdminURL = "", ""
	}
	for i := range spec.Size.Brokers {
		st.Processes = append(st.Processes, ProcessHealth{Role: "broker", Index: i, Alive: true, Healthy: true})
	}
	for i := range spec.Size.Bookies {
		st.Processes = append(st.Processes, ProcessHealth{Role: "bookie", Index: i, Alive: true, Healthy: true})
	}
	m.clusters[spec.Name] = st
	return st, nil
}

// Status returns the status Apply last produced.
func (m *Memory) Status(ctx context.Context, name string) (ClusterStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.clusters[name]
	if !ok {
		return ClusterStatus{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return st, nil
}

// Delete forgets the cluster.
func (m *Memory) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.clusters[name]; ok {
		m.deletes[name]++
	}
	delete(m.clusters, name)
	return nil
}

// List returns the clusters held, sorted.
func (m *Memory) List(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.clusters))
	for n := range m.clusters {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// FailApply makes every later Apply of name report FAILED with msg; an
// empty msg clears the failure.
func (m *Memory) FailApply(name, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if msg == "" {
		delete(m.fail, name)
	} else {
		m.fail[name] = msg
	}
}

// Changes is how many times Apply created or resized name: an Apply of an
// unchanged spec does not count (the in-memory analogue of restarting
// processes).
func (m *Memory) Changes(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changes[name]
}

// Deletes is how many times Delete removed name.
func (m *Memory) Deletes(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deletes[name]
}
