package agent

// The failover endpoint, served by the agent too (static stability): GET
// /v1/organizations/{org}/replicationGroups/{group}/failoverTarget, the
// control plane's path and JSON. The agent forwards each request to the
// control plane with the caller's own credentials, so the control plane
// authenticates and authorizes it; a successful answer is cached per
// credential (its SHA-256, never the credential) and group, in memory and
// in a file. When the control plane cannot be reached, the last answer
// given to that credential is served, with the header
// X-Magnetar-Failover-Source: cache. A credential the control plane
// refuses loses its cached answers.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
	"github.com/magnetar-dev/magnetar/internal/atomicfile"
)

var failoverPath = regexp.MustCompile(`^/v1/(organizations/[^/]+/replicationGroups/[^/]+)/failoverTarget$`)

// FailoverAddrFileName is the name the agent command gives
// Config.FailoverAddrFile under its data directory.
const FailoverAddrFileName = "failover.addr"

// FailoverServer serves the failover endpoint. Create it with
// NewFailoverServer; Serve until Shutdown.
type FailoverServer struct {
	rpc  cpv1.ReplicationGroupsClient
	log  *slog.Logger
	file string
	srv  *http.Server
	lis  net.Listener

	mu    sync.Mutex
	cache map[string]cachedTarget // sha256(authorization) + " " + group
}

type cachedTarget struct {
	Target json.RawMessage `json:"target"`
	At     time.Time       `json:"at"`
}

// NewFailoverServer listens on addr and forwards to the control plane over
// conn (a connection without credentials of its own). cacheFile keeps the
// answers across restarts ("" keeps them in memory only).
func NewFailoverServer(addr string, conn *grpc.ClientConn, cacheFile string, log *slog.Logger) (*FailoverServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	f := &FailoverServer{rpc: cpv1.NewReplicationGroupsClient(conn), log: log, file: cacheFile, lis: lis, cache: map[string]cachedTarget{}}
	if cacheFile != "" {
		if raw, err := os.ReadFile(cacheFile); err == nil {
			if err := json.Unmarshal(raw, &f.cache); err != nil {
				log.Warn("agent: failover cache unreadable; starting empty", "file", cacheFile, "err", err)
				f.cache = map[string]cachedTarget{}
			}
		}
	}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	return f, nil
}

// Addr is the listening address.
func (f *FailoverServer) Addr() net.Addr { return f.lis.Addr() }

// Serve serves until Shutdown.
func (f *FailoverServer) Serve() error {
	err := f.srv.Serve(f.lis)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops serving.
func (f *FailoverServer) Shutdown(ctx context.Context) error { return f.srv.Shutdown(ctx) }

func writeErr(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
}

var targetJSON = protojson.MarshalOptions{EmitUnpopulated: true}

func (f *FailoverServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	m := failoverPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		writeErr(w, http.StatusNotFound, "not found: only GET /v1/organizations/{org}/replicationGroups/{group}/failoverTarget is served here")
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeErr(w, http.StatusMethodNotAllowed, "method not allowed: use GET")
		return
	}
	group := m[1]
	auth := r.Header.Get("Authorization")
	if auth == "" {
		writeErr(w, http.StatusUnauthorized, "not authenticated: send Authorization: Bearer <api key>")
		return
	}
	sum := sha256.Sum256([]byte(auth))
	key := hex.EncodeToString(sum[:]) + " " + group
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(r.Context(), "authorization", auth), 2*time.Second)
	defer cancel()
	t, err := f.rpc.GetFailoverTarget(ctx, &cpv1.GetFailoverTargetRequest{Name: group})
	if err == nil {
		raw, merr := targetJSON.Marshal(t)
		if merr != nil {
			writeErr(w, http.StatusInternalServerError, "encode answer")
			return
		}
		f.remember(key, raw)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Magnetar-Failover-Source", "control-plane")
		w.Write(raw)
		return
	}
	switch status.Code(err) {
	case codes.Unauthenticated:
		f.forget(key)
		writeErr(w, http.StatusUnauthorized, status.Convert(err).Message())
		return
	case codes.PermissionDenied:
		f.forget(key)
		writeErr(w, http.StatusForbidden, status.Convert(err).Message())
		return
	case codes.NotFound:
		f.forget(key)
		writeErr(w, http.StatusNotFound, status.Convert(err).Message())
		return
	case codes.InvalidArgument:
		writeErr(w, http.StatusBadRequest, status.Convert(err).Message())
		return
	}
	f.mu.Lock()
	c, ok := f.cache[key]
	f.mu.Unlock()
	if !ok {
		writeErr(w, http.StatusServiceUnavailable, "the control plane is unreachable and this agent has no earlier answer for these credentials")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Magnetar-Failover-Source", "cache")
	w.Header().Set("X-Magnetar-Failover-Cached-At", c.At.UTC().Format(time.RFC3339Nano))
	w.Write(c.Target)
}

func (f *FailoverServer) remember(key string, raw []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old, ok := f.cache[key]
	f.cache[key] = cachedTarget{Target: raw, At: time.Now()}
	if ok && string(old.Target) == string(raw) && time.Since(old.At) < time.Minute {
		return // unchanged: spare the disk
	}
	f.saveLocked()
}

func (f *FailoverServer) forget(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cache[key]; ok {
		delete(f.cache, key)
		f.saveLocked()
	}
}

func (f *FailoverServer) saveLocked() {
	if f.file == "" {
		return
	}
	raw, err := json.Marshal(f.cache)
	if err == nil {
		err = atomicfile.WriteFile(f.file, raw)
	}
	if err != nil {
		f.log.Warn("agent: save failover cache", "file", f.file, "err", err)
	}
}
