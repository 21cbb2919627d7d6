package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
	"github.com/magnetar-dev/magnetar/dataplane/functions/fnconfig"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// Metadata layout (all under Config.Root, default "/functions"):
//
//	records/<kind>/<tenant>/<namespace>/<name>  Record (JSON)
//	assignment                                  Assignment (JSON), written by the leader
//	workers/<worker id>                         WorkerInfo (JSON), ephemeral
//	leader                                      the scheduler's election
//	packages/<sha256 hex>                       PackageInfo (JSON): the ledger holding it
//	state/<tenant>/<namespace>/<name>/<key>     a state value (raw bytes; counters 8-byte big-endian)

// Package says where an instance's code comes from.
type Package struct {
	// Digest is the SHA-256 (hex) of an uploaded package in the package
	// store.
	Digest string `json:"digest,omitempty"`
	// FileName is the uploaded file's base name; runtimes pick how to load
	// it by its extension (.jar, .nar, .py, .zip, .whl).
	FileName string `json:"fileName,omitempty"`
	Size     int64  `json:"size,omitempty"`
	// Builtin names a connector of the workers' connectors directory.
	Builtin string `json:"builtin,omitempty"`
	// URL is the package URL the component was created with, if any.
	URL string `json:"url,omitempty"`
}

// Record is one function, source or sink.
type Record struct {
	Kind      fnconfig.Kind `json:"kind"`
	Tenant    string        `json:"tenant"`
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	// Config is the normalized config, what GET answers.
	Config json.RawMessage `json:"config"`
	// Details is the FunctionDetails instances run, as proto3 JSON.
	Details json.RawMessage `json:"details"`
	Package Package         `json:"package"`
	// Version counts updates; instances restart on a new version.
	Version    int64 `json:"version"`
	CreateTime int64 `json:"createTime"`
	// Stopped holds the instances stopped with stop (instance id).
	Stopped []int `json:"stopped,omitempty"`
	// Restarts counts restart requests per instance id; an instance whose
	// count changes is restarted by its worker.
	Restarts map[int]int64 `json:"restarts,omitempty"`
	// Principal is the role that created it (the instances' identity when
	// authentication is on).
	Principal string `json:"principal,omitempty"`
}

// FQFN is tenant/namespace/name.
func (r *Record) FQFN() string { return r.Tenant + "/" + r.Namespace + "/" + r.Name }

// FunctionDetails decodes Details.
func (r *Record) FunctionDetails() (*pb.FunctionDetails, error) {
	d := &pb.FunctionDetails{}
	if err := protojson.Unmarshal(r.Details, d); err != nil {
		return nil, fmt.Errorf("worker: details of %s: %w", r.FQFN(), err)
	}
	return d, nil
}

// Parallelism is the number of instances.
func (r *Record) Parallelism() int {
	d, err := r.FunctionDetails()
	if err != nil || d.Parallelism < 1 {
		return 1
	}
	return int(d.Parallelism)
}

func (r *Record) isStopped(i int) bool { return slices.Contains(r.Stopped, i) }

// InstanceKey names instance i of a component.
func InstanceKey(kind fnconfig.Kind, tenant, namespace, name string, i int) string {
	return string(kind) + "/" + tenant + "/" + namespace + "/" + name + "/" + strconv.Itoa(i)
}

// Assignment is the scheduler's output: instance key -> worker id.
type Assignment struct {
	Instances map[string]string `json:"instances"`
}

// WorkerInfo is a live worker's registration.
type WorkerInfo struct {
	ID string `json:"workerId"`
	// URL is the worker's admin HTTP(S) URL (status calls are forwarded there).
	URL string `json:"url"`
	// Host and Port are what /admin/v2/worker/cluster reports.
	Host string `json:"workerHostname"`
	Port int    `json:"port"`
}

// records is the record store over the metadata store.
type records struct {
	md   metadata.Store
	root string
}

func (s records) key(kind fnconfig.Kind, tenant, namespace, name string) string {
	return s.root + "/records/" + string(kind) + "/" + tenant + "/" + namespace + "/" + name
}

func (s records) get(ctx context.Context, kind fnconfig.Kind, tenant, namespace, name string) (*Record, metadata.Version, error) {
	kv, err := s.md.Get(ctx, s.key(kind, tenant, namespace, name))
	if err != nil {
		return nil, 0, err
	}
	r := &Record{}
	if err := json.Unmarshal(kv.Value, r); err != nil {
		return nil, 0, fmt.Errorf("worker: record %s: %w", kv.Key, err)
	}
	return r, kv.Version, nil
}

func (s records) create(ctx context.Context, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.md.Create(ctx, s.key(r.Kind, r.Tenant, r.Namespace, r.Name), b)
	return err
}

func (s records) put(ctx context.Context, r *Record, expected metadata.Version) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.md.Put(ctx, s.key(r.Kind, r.Tenant, r.Namespace, r.Name), b, expected)
	return err
}

// update applies fn to the record under compare-and-set, retrying on a
// concurrent write.
func (s records) update(ctx context.Context, kind fnconfig.Kind, tenant, namespace, name string, fn func(*Record) error) (*Record, error) {
	for {
		r, v, err := s.get(ctx, kind, tenant, namespace, name)
		if err != nil {
			return nil, err
		}
		if err := fn(r); err != nil {
			return nil, err
		}
		err = s.put(ctx, r, v)
		if errors.Is(err, metadata.ErrBadVersion) {
			continue
		}
		return r, err
	}
}

func (s records) delete(ctx context.Context, kind fnconfig.Kind, tenant, namespace, name string) error {
	return s.md.Delete(ctx, s.key(kind, tenant, namespace, name), metadata.AnyVersion)
}

// names lists a namespace's components of one kind.
func (s records) names(ctx context.Context, kind fnconfig.Kind, tenant, namespace string) ([]string, error) {
	return s.md.Children(ctx, s.root+"/records/"+string(kind)+"/"+tenant+"/"+namespace)
}

// all reads every record.
func (s records) all(ctx context.Context) ([]*Record, error) {
	var out []*Record
	for _, kind := range []fnconfig.Kind{fnconfig.KindFunction, fnconfig.KindSource, fnconfig.KindSink} {
		base := s.root + "/records/" + string(kind)
		tenants, err := s.md.Children(ctx, base)
		if err != nil {
			return nil, err
		}
		for _, t := range tenants {
			nss, err := s.md.Children(ctx, base+"/"+t)
			if err != nil {
				return nil, err
			}
			for _, ns := range nss {
				names, err := s.md.Children(ctx, base+"/"+t+"/"+ns)
				if err != nil {
					return nil, err
				}
				for _, n := range names {
					r, _, err := s.get(ctx, kind, t, ns, n)
					if errors.Is(err, metadata.ErrNotFound) {
						continue
					}
					if err != nil {
						return nil, err
					}
					out = append(out, r)
				}
			}
		}
	}
	return out, nil
}
