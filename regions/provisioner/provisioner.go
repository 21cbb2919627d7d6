package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// ErrNotFound is returned by Status for a cluster the provisioner does not hold.
var ErrNotFound = errors.New("provisioner: cluster not found")

// ErrInvalidSpec is wrapped by Apply for a spec it cannot act on.
var ErrInvalidSpec = errors.New("provisioner: invalid spec")

// Provisioner converges the data planes of a region's clusters to specs.
type Provisioner interface {
	// Apply converges the cluster to spec: it creates what is missing,
	// scales up or down, replaces crashed processes, and returns the
	// cluster's status as it is then. Apply does not wait for the cluster
	// to become ready; call it (or Status) again. It is idempotent: applying
	// the spec of a ready cluster changes nothing.
	Apply(ctx context.Context, spec ClusterSpec) (ClusterStatus, error)
	// Status returns a cluster's status, or ErrNotFound.
	Status(ctx context.Context, name string) (ClusterStatus, error)
	// Delete tears the cluster down and removes its data. Deleting a
	// cluster that does not exist is not an error.
	Delete(ctx context.Context, name string) error
	// List returns the names of the clusters the provisioner holds.
	List(ctx context.Context) ([]string, error)
}

// Size is a cluster's number of brokers and bookies.
type Size struct {
	Brokers int
	Bookies int
}

// ClusterSpec is the desired state of one cluster.
type ClusterSpec struct {
	// Name is the control plane's resource name,
	// "organizations/{org}/clusters/{cluster}".
	Name string
	Size Size
	// Revision is the desired-state revision the spec comes from; recorded
	// and reported back, never compared.
	Revision int64
	// Auth, when set, makes the brokers authenticate and authorize every
	// client; nil: they do neither.
	Auth *Auth
}

// Auth is how a cluster's brokers authenticate and authorize clients.
type Auth struct {
	// Issuer is the URL of the OAuth2/OIDC issuer whose tokens the brokers
	// accept (its keys come from its discovery document's jwks_uri).
	Issuer string
	// Audiences are the aud values the brokers accept: a token must carry
	// one of them (the region agent gives the cluster's own audience and
	// its organization's), so a token for another cluster or organization
	// is refused.
	Audiences []string
	// SuperuserRoles may do everything (the region agent's own role).
	SuperuserRoles []string
	// FunctionsTokenFile, when set, holds the token the brokers' function
	// instances authenticate with (kept fresh by the region agent).
	FunctionsTokenFile string `json:",omitempty"`
}

// UnmarshalJSON reads an Auth, taking a record with a single "Audience"
// as Audiences of one.
func (a *Auth) UnmarshalJSON(b []byte) error {
	type plain Auth
	var v struct {
		plain
		Audience string
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*a = Auth(v.plain)
	if len(a.Audiences) == 0 && v.Audience != "" {
		a.Audiences = []string{v.Audience}
	}
	return nil
}

// Validate checks the spec.
func (s ClusterSpec) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("%w: name is empty", ErrInvalidSpec)
	}
	if a := s.Auth; a != nil && (a.Issuer == "" || len(a.Audiences) == 0 || slices.Contains(a.Audiences, "")) {
		return fmt.Errorf("%w: %s: auth needs an issuer and at least one audience, none empty", ErrInvalidSpec, s.Name)
	}
	if s.Size.Brokers < 1 || s.Size.Bookies < 1 {
		return fmt.Errorf("%w: %s: size must have at least one broker and one bookie (got %d brokers, %d bookies)",
			ErrInvalidSpec, s.Name, s.Size.Brokers, s.Size.Bookies)
	}
	return nil
}

// State is a cluster's condition as the provisioner sees it.
type State string

const (
	// StateProgressing: processes are starting, restarting or changing.
	StateProgressing State = "PROGRESSING"
	// StateReady: every broker answers its health check and the metadata
	// store is up; ServiceURL and AdminURL are set.
	StateReady State = "READY"
	// StateFailed: the provisioner cannot make progress without help
	// (Message says why). Apply keeps trying.
	StateFailed State = "FAILED"
)

// ClusterStatus is what a provisioner observed of a cluster.
type ClusterStatus struct {
	Name  string
	State State
	// ServiceURL is the Pulsar binary protocol URL, listing every broker:
	// "pulsar://host:port,host:port".
	ServiceURL string
	// AdminURL is the first broker's admin REST API, "http://host:port".
	AdminURL string
	// TLSServiceURL and TLSAdminURL are the same brokers over TLS,
	// "pulsar+ssl://host:port,host:port" and "https://host:port"; empty
	// when the cluster serves no TLS.
	TLSServiceURL, TLSAdminURL string
	// CACertPEM is the PEM certificate of the CA that issued the brokers'
	// certificates: what clients of the TLS URLs trust. Empty without TLS.
	CACertPEM string
	Message   string
	// Size is the size the cluster is being converged to.
	Size     Size
	Revision int64
	// Processes describes each process of the cluster (empty for
	// provisioners without processes).
	Processes []ProcessHealth
}

// ProcessHealth is the health of one data-plane process.
type ProcessHealth struct {
	// Role is "metadata", "bookie" or "broker".
	Role  string
	Index int
	PID   int
	// Addr is the main address: the client URL, bookie or broker address.
	Addr string
	// HTTPAddr is a broker's admin and metrics listener, host:port ("" for
	// other roles), and HTTPSAddr its https:// twin ("" without TLS).
	HTTPAddr  string
	HTTPSAddr string
	Alive     bool
	Healthy   bool
	Restarts  int
	Message   string
}
