package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/magnetar-dev/magnetar/api/pulsarfunctions"
	"github.com/magnetar-dev/magnetar/dataplane/auth"
	"github.com/magnetar-dev/magnetar/dataplane/broker"
	"github.com/magnetar-dev/magnetar/dataplane/functions/fnconfig"
	"github.com/magnetar-dev/magnetar/dataplane/metadata"
)

// The REST API: Pulsar's /admin/v3 functions, sources and sinks resources
// (and the singular /source, /sink the Java admin client uses), the
// worker's /admin/v2/worker endpoints, and Magnetar's state API for
// instances (/magnetar/v1/functions/...). Errors are Pulsar's
// {"reason": "..."} with its status codes: 400 for a refused config or a
// name that exists, 404 for an unknown component.

// forwardedHeader marks a status call one worker forwarded to the owner
// of an instance; the owner answers it from what it runs, never forwards
// it again.
const forwardedHeader = "X-Magnetar-Functions-Forwarded"

type httpError struct {
	code   int
	reason string
}

func (e *httpError) Error() string { return e.reason }

func errCode(code int, format string, args ...any) error {
	return &httpError{code: code, reason: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, reason string) {
	writeJSON(w, code, map[string]string{"reason": reason})
}

// ServeHTTP implements http.Handler.
func (w *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			w.log.Error("functions handler panic", "method", r.Method, "path", r.URL.EscapedPath(), "panic", v, "stack", string(debug.Stack()))
			writeError(rw, http.StatusInternalServerError, "Internal server error")
		}
	}()
	seg, err := segments(r)
	if err != nil {
		writeError(rw, http.StatusBadRequest, "malformed path")
		return
	}
	if err := w.route(rw, r, seg); err != nil {
		var he *httpError
		switch {
		case errors.As(err, &he):
			writeError(rw, he.code, he.reason)
		case fnconfig.IsConfigError(err):
			writeError(rw, http.StatusBadRequest, err.Error())
		case errors.Is(err, context.DeadlineExceeded):
			writeError(rw, http.StatusServiceUnavailable, "request timed out")
		default:
			w.log.Warn("functions request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			writeError(rw, http.StatusInternalServerError, err.Error())
		}
	}
}

func segments(r *http.Request) ([]string, error) {
	raw := strings.Trim(r.URL.EscapedPath(), "/")
	parts := strings.Split(raw, "/")
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil {
			return nil, err
		}
		parts[i] = u
	}
	return parts, nil
}

func kindOf(c string) (fnconfig.Kind, bool) {
	switch c {
	case "functions":
		return fnconfig.KindFunction, true
	case "sources", "source":
		return fnconfig.KindSource, true
	case "sinks", "sink":
		return fnconfig.KindSink, true
	}
	return "", false
}

func (w *Worker) route(rw http.ResponseWriter, r *http.Request, seg []string) error {
	ctx := r.Context()
	switch {
	case seg[0] == "magnetar":
		return w.stateAPI(rw, r, seg[3:])
	case seg[1] == "v2":
		return w.workerAPI(rw, r, seg[2:])
	}
	rest := seg[2:]
	if len(rest) == 0 {
		return errCode(http.StatusNotFound, "Not found")
	}
	kind, ok := kindOf(rest[0])
	if !ok {
		return errCode(http.StatusNotFound, "Not found")
	}
	rest = rest[1:]
	get, post := r.Method == http.MethodGet, r.Method == http.MethodPost
	switch {
	case len(rest) == 1 && get && (rest[0] == "connectors" || rest[0] == "builtinsources" || rest[0] == "builtinsinks"):
		writeJSON(rw, http.StatusOK, w.builtinConnectors(rest[0]))
		return nil
	case len(rest) == 1 && get && rest[0] == "builtins":
		writeJSON(rw, http.StatusOK, []any{}) // no builtin functions are installed
		return nil
	case len(rest) == 3 && get && (rest[0] == "builtinsources" || rest[0] == "builtinsinks") && rest[2] == "configdefinition":
		if _, ok := w.connector[rest[1]]; !ok {
			return errCode(http.StatusNotFound, "builtin %s %s does not exist", kind, rest[1])
		}
		writeJSON(rw, http.StatusOK, []any{})
		return nil
	case len(rest) >= 1 && post && (strings.HasPrefix(rest[0], "reload") || (rest[0] == "builtins" && len(rest) == 2)):
		w.reloadConnectors()
		rw.WriteHeader(http.StatusNoContent)
		return nil
	case len(rest) == 1 && rest[0] == "upload", len(rest) == 1 && rest[0] == "download":
		return errCode(http.StatusBadRequest, "package management by path is not supported: create the function with its package or a URL")
	case len(rest) == 2 && get:
		return w.list(rw, r, kind, rest[0], rest[1])
	case len(rest) < 3:
		return errCode(http.StatusNotFound, "Not found")
	}
	t, ns, n := rest[0], rest[1], rest[2]
	op := rest[3:]
	switch {
	case len(op) == 0:
		switch r.Method {
		case http.MethodPost:
			return w.register(rw, r, kind, t, ns, n, false)
		case http.MethodPut:
			return w.register(rw, r, kind, t, ns, n, true)
		case http.MethodGet:
			return w.getConfig(rw, ctx, kind, t, ns, n)
		case http.MethodDelete:
			return w.deregister(rw, ctx, kind, t, ns, n)
		}
	case len(op) == 1 && get && op[0] == "status":
		return w.status(rw, r, kind, t, ns, n, -1)
	case len(op) == 1 && get && op[0] == "stats" && kind == fnconfig.KindFunction:
		return w.stats(rw, r, t, ns, n, -1)
	case len(op) == 1 && post && (op[0] == "start" || op[0] == "stop" || op[0] == "restart"):
		return w.control(rw, ctx, kind, t, ns, n, -1, op[0])
	case len(op) == 1 && post && op[0] == "trigger" && kind == fnconfig.KindFunction:
		return w.trigger(rw, r, t, ns, n)
	case len(op) == 1 && get && op[0] == "download":
		return w.download(rw, ctx, kind, t, ns, n)
	case len(op) == 2 && op[0] == "state" && kind == fnconfig.KindFunction && (get || post):
		return w.pulsarState(rw, r, t, ns, n, op[1])
	case len(op) == 2 && (get || post):
		i, err := strconv.Atoi(op[0])
		if err != nil || i < 0 {
			return errCode(http.StatusBadRequest, "Invalid instance id %q", op[0])
		}
		switch {
		case get && op[1] == "status":
			return w.status(rw, r, kind, t, ns, n, i)
		case get && op[1] == "stats" && kind == fnconfig.KindFunction:
			return w.stats(rw, r, t, ns, n, i)
		case post && (op[1] == "start" || op[1] == "stop" || op[1] == "restart"):
			return w.control(rw, ctx, kind, t, ns, n, i, op[1])
		}
	}
	return errCode(http.StatusNotFound, "Not found")
}

func (w *Worker) builtinConnectors(which string) []Connector {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Connector
	for _, c := range w.connector {
		if (which == "builtinsources" && c.SourceClass == "") || (which == "builtinsinks" && c.SinkClass == "") {
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Connector) int { return strings.Compare(a.Name, b.Name) })
	if out == nil {
		out = []Connector{}
	}
	return out
}

func (w *Worker) reloadConnectors() {
	conns, err := ScanConnectors(w.cfg.ConnectorsDir)
	if err != nil {
		w.log.Warn("functions: reading builtin connectors", "err", err)
	}
	w.mu.Lock()
	w.connector = conns
	w.mu.Unlock()
}

func (w *Worker) lookupConnector(name string) (Connector, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.connector[name]
	return c, ok
}

func (w *Worker) list(rw http.ResponseWriter, r *http.Request, kind fnconfig.Kind, t, ns string) error {
	if err := w.checkNamespace(r.Context(), t, ns); err != nil {
		return err
	}
	names, err := w.recs.names(r.Context(), kind, t, ns)
	if err != nil {
		return err
	}
	if names == nil {
		names = []string{}
	}
	writeJSON(rw, http.StatusOK, names)
	return nil
}

func (w *Worker) checkNamespace(ctx context.Context, t, ns string) error {
	if _, err := w.cfg.Broker.Resources().GetTenant(ctx, t); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return errCode(http.StatusBadRequest, "Tenant %s does not exist", t)
		}
		return err
	}
	if _, _, err := w.cfg.Broker.Resources().GetNamespace(ctx, t, ns); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			return errCode(http.StatusBadRequest, "Namespace %s/%s does not exist", t, ns)
		}
		return err
	}
	return nil
}

func (w *Worker) getRecord(ctx context.Context, kind fnconfig.Kind, t, ns, n string) (*Record, metadata.Version, error) {
	rec, v, err := w.recs.get(ctx, kind, t, ns, n)
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, 0, errCode(http.StatusNotFound, "%s %s doesn't exist", kind.Title(), n)
	}
	return rec, v, err
}

func (w *Worker) getConfig(rw http.ResponseWriter, ctx context.Context, kind fnconfig.Kind, t, ns, n string) error {
	rec, _, err := w.getRecord(ctx, kind, t, ns, n)
	if err != nil {
		return err
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(http.StatusOK)
	rw.Write(rec.Config)
	return nil
}

// upload is the multipart body of a create or update.
type upload struct {
	config   []byte // functionConfig / sourceConfig / sinkConfig
	url      string
	file     string // the uploaded package in a temporary file
	fileName string
	options  []byte
}

func (u *upload) cleanup() {
	if u.file != "" {
		os.Remove(u.file)
	}
}

func (w *Worker) readUpload(r *http.Request, kind fnconfig.Kind) (*upload, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") {
		return nil, errCode(http.StatusBadRequest, "expected a multipart/form-data body with %sConfig", kind)
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	u := &upload{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			u.cleanup()
			return nil, errCode(http.StatusBadRequest, "malformed multipart body: %v", err)
		}
		switch part.FormName() {
		case string(kind) + "Config":
			u.config, err = io.ReadAll(io.LimitReader(part, 16<<20))
		case "url":
			var b []byte
			b, err = io.ReadAll(io.LimitReader(part, 64<<10))
			u.url = strings.TrimSpace(string(b))
		case "updateOptions":
			u.options, err = io.ReadAll(io.LimitReader(part, 64<<10))
		case "data":
			u.fileName = filepath.Base(part.FileName())
			err = w.savePart(u, part)
		default:
			_, err = io.Copy(io.Discard, io.LimitReader(part, 16<<20))
		}
		part.Close()
		if err != nil {
			u.cleanup()
			return nil, err
		}
	}
	return u, nil
}

func (w *Worker) savePart(u *upload, part io.Reader) error {
	f, err := os.CreateTemp(filepath.Join(w.cfg.DataDir, "packages"), ".upload-*")
	if err != nil {
		return err
	}
	u.file = f.Name()
	n, err := io.Copy(f, io.LimitReader(part, w.cfg.MaxPackageSize+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errCode(http.StatusBadRequest, "reading the package: %v", err)
	}
	if n > w.cfg.MaxPackageSize {
		return errCode(http.StatusRequestEntityTooLarge, "package is larger than the limit of %d bytes", w.cfg.MaxPackageSize)
	}
	if n == 0 {
		os.Remove(u.file)
		u.file = ""
	}
	return nil
}

// fetchURL downloads a package URL into the upload (http, https, file).
func (w *Worker) fetchURL(ctx context.Context, u *upload, role string) error {
	pu, err := url.Parse(u.url)
	if err != nil {
		return errCode(http.StatusBadRequest, "Invalid package URL %q: %v", u.url, err)
	}
	u.fileName = path.Base(pu.Path)
	switch pu.Scheme {
	case "file":
		// A file on the worker's own disk: only a superuser may name one.
		if w.cfg.Broker.AuthzEnabled() {
			if err := w.cfg.Broker.AuthorizeSuperuser(ctx, role); err != nil {
				return errCode(http.StatusForbidden, "only a superuser may create from a file: URL")
			}
		}
		f, err := os.Open(pu.Path)
		if err != nil {
			return errCode(http.StatusBadRequest, "Corrupt package file: %v", err)
		}
		defer f.Close()
		return w.savePart(u, f)
	case "http", "https":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url, nil)
		if err != nil {
			return errCode(http.StatusBadRequest, "Invalid package URL: %v", err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return errCode(http.StatusBadRequest, "Corrupt package file: cannot download %s: %v", u.url, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errCode(http.StatusBadRequest, "Corrupt package file: downloading %s answered %s", u.url, resp.Status)
		}
		return w.savePart(u, resp.Body)
	case "function", "source", "sink":
		return errCode(http.StatusBadRequest, "package URL %s: the packages management service is not enabled; upload the package or give an http(s) URL", u.url)
	}
	return errCode(http.StatusBadRequest, "Invalid package URL %q: use http://, https://, file: or upload the package", u.url)
}

// register creates (update false) or updates a component.
func (w *Worker) register(rw http.ResponseWriter, r *http.Request, kind fnconfig.Kind, t, ns, n string, update bool) error {
	ctx := r.Context()
	role, _ := auth.RoleFrom(ctx)
	u, err := w.readUpload(r, kind)
	if err != nil {
		return err
	}
	defer u.cleanup()
	if len(u.config) == 0 {
		return errCode(http.StatusBadRequest, "%s config is not provided", kind.Title())
	}
	if err := w.checkNamespace(ctx, t, ns); err != nil {
		return err
	}
	var existing *Record
	var version metadata.Version
	cfgJSON := u.config
	if update {
		if existing, version, err = w.getRecord(ctx, kind, t, ns, n); err != nil {
			return err
		}
		if cfgJSON, err = fnconfig.Merge(kind, existing.Config, u.config); err != nil {
			return err
		}
	} else if _, _, err := w.recs.get(ctx, kind, t, ns, n); err == nil {
		return errCode(http.StatusBadRequest, "%s %s already exists", kind.Title(), n)
	}
	if u.url != "" && u.file == "" && !strings.HasPrefix(u.url, fnconfig.BuiltinPrefix) {
		if err := w.fetchURL(ctx, u, role); err != nil {
			return err
		}
	}
	rec := &Record{Kind: kind, Tenant: t, Namespace: ns, Name: n, CreateTime: time.Now().UnixMilli(), Principal: role}
	if existing != nil {
		rec.CreateTime, rec.Version, rec.Stopped, rec.Restarts, rec.Principal = existing.CreateTime, existing.Version+1, existing.Stopped, existing.Restarts, existing.Principal
		rec.Package = existing.Package
	}
	if u.file != "" {
		digest, size, err := hashFile(u.file)
		if err != nil {
			return err
		}
		rec.Package = Package{Digest: digest, FileName: u.fileName, Size: size, URL: u.url}
	}
	details, normalized, err := w.normalize(kind, t, ns, n, cfgJSON, u, rec)
	if err != nil {
		return err
	}
	if rec.Package.Digest == "" && rec.Package.Builtin == "" {
		return errCode(http.StatusBadRequest, "%s package is not provided", kind.Title())
	}
	if err := w.checkRuntime(details); err != nil {
		return err
	}
	if err := w.checkTopics(ctx, role, details); err != nil {
		return err
	}
	if err := w.checkClass(kind, details, rec, u.file); err != nil {
		return err
	}
	if u.file != "" {
		if err := w.cfg.Packages.Put(ctx, rec.Package.Digest, u.file); err != nil {
			return fmt.Errorf("storing the package: %w", err)
		}
	}
	rec.Config = normalized
	if rec.Details, err = marshalDetails(details); err != nil {
		return err
	}
	if update {
		err = w.recs.put(ctx, rec, version)
		if errors.Is(err, metadata.ErrBadVersion) {
			return errCode(http.StatusConflict, "%s %s was updated concurrently; retry", kind.Title(), n)
		}
		if err == nil && existing.Package.Digest != "" && existing.Package.Digest != rec.Package.Digest {
			w.collectPackage(context.WithoutCancel(ctx), existing.Package.Digest)
		}
	} else {
		err = w.recs.create(ctx, rec)
		if errors.Is(err, metadata.ErrExists) {
			return errCode(http.StatusBadRequest, "%s %s already exists", kind.Title(), n)
		}
	}
	if err != nil {
		return err
	}
	w.log.Info("functions: registered", "kind", kind, "fqfn", rec.FQFN(), "version", rec.Version, "update", update)
	rw.WriteHeader(http.StatusNoContent)
	return nil
}

func marshalDetails(d *pb.FunctionDetails) (json.RawMessage, error) {
	b, err := protoJSON(d)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}

// normalize decodes the config of kind, applies the path's identity and
// defaults, and resolves a builtin archive.
func (w *Worker) normalize(kind fnconfig.Kind, t, ns, n string, cfgJSON []byte, u *upload, rec *Record) (*pb.FunctionDetails, []byte, error) {
	identity := func(ct, cns, cn *string) error {
		for _, f := range []struct {
			got  *string
			want string
			what string
		}{{ct, t, "Tenant"}, {cns, ns, "Namespace"}, {cn, n, kind.Title() + " name"}} {
			if *f.got == "" {
				*f.got = f.want
			} else if *f.got != f.want {
				return errCode(http.StatusBadRequest, "%s %s in the config does not match %s in the path", f.what, *f.got, f.want)
			}
		}
		return nil
	}
	builtin := func(archive string) (string, error) {
		name := strings.TrimPrefix(archive, fnconfig.BuiltinPrefix)
		if name == archive && strings.HasPrefix(u.url, fnconfig.BuiltinPrefix) {
			name = strings.TrimPrefix(u.url, fnconfig.BuiltinPrefix)
		} else if name == archive {
			return "", nil
		}
		c, ok := w.lookupConnector(name)
		if !ok {
			return "", errCode(http.StatusBadRequest, "Built-in %s is not available: %s", kind, name)
		}
		if u.file == "" {
			rec.Package = Package{Builtin: name}
		}
		if kind == fnconfig.KindSource {
			if c.SourceClass == "" {
				return "", errCode(http.StatusBadRequest, "Built-in connector %s is not a source", name)
			}
			return c.SourceClass, nil
		}
		if c.SinkClass == "" {
			return "", errCode(http.StatusBadRequest, "Built-in connector %s is not a sink", name)
		}
		return c.SinkClass, nil
	}
	dec := func(v any) error {
		if err := json.Unmarshal(cfgJSON, v); err != nil {
			return errCode(http.StatusBadRequest, "Invalid %s config: %v", kind, err)
		}
		return nil
	}
	// Per kind: the config, its identity fields, its archive (sources and
	// sinks), and its defaults and conversion.
	var (
		cfg       any
		ids       [3]*string
		archive   *string
		normalize func(connectorClass string) error
		details   func() (*pb.FunctionDetails, error)
	)
	switch kind {
	case fnconfig.KindFunction:
		c := &fnconfig.FunctionConfig{}
		cfg, ids, details = c, [3]*string{&c.Tenant, &c.Namespace, &c.Name}, c.Details
		normalize = func(string) error { return c.Normalize() }
	case fnconfig.KindSource:
		c := &fnconfig.SourceConfig{}
		cfg, ids, archive, normalize, details = c, [3]*string{&c.Tenant, &c.Namespace, &c.Name}, &c.Archive, c.Normalize, c.Details
	case fnconfig.KindSink:
		c := &fnconfig.SinkConfig{}
		cfg, ids, archive, normalize, details = c, [3]*string{&c.Tenant, &c.Namespace, &c.Name}, &c.Archive, c.Normalize, c.Details
	}
	if err := dec(cfg); err != nil {
		return nil, nil, err
	}
	if err := identity(ids[0], ids[1], ids[2]); err != nil {
		return nil, nil, err
	}
	cls := ""
	if archive != nil {
		var err error
		if cls, err = builtin(*archive); err != nil {
			return nil, nil, err
		}
	}
	if err := normalize(cls); err != nil {
		return nil, nil, err
	}
	d, err := details()
	if err != nil {
		return nil, nil, err
	}
	if d.Builtin == "" && rec.Package.Builtin != "" {
		d.Builtin = rec.Package.Builtin
	}
	b, err := json.Marshal(cfg)
	return d, b, err
}

func (w *Worker) checkRuntime(d *pb.FunctionDetails) error {
	switch d.Runtime {
	case pb.FunctionDetails_JAVA:
		if w.cfg.Runtimes.Java == nil {
			return errCode(http.StatusBadRequest, "the Java runtime is not installed on this worker (run dataplane/functions/javainstance/setup.sh)")
		}
	case pb.FunctionDetails_PYTHON:
		if w.cfg.Runtimes.PythonMain == "" {
			return errCode(http.StatusBadRequest, "the Python runtime is not installed on this worker")
		}
	}
	return nil
}

// checkClass refuses a Java component whose class is not in its package,
// as Pulsar does at create.
func (w *Worker) checkClass(kind fnconfig.Kind, d *pb.FunctionDetails, rec *Record, file string) error {
	if d.Runtime != pb.FunctionDetails_JAVA {
		return nil
	}
	archive := file
	if archive == "" && rec.Package.Builtin != "" {
		c, _ := w.lookupConnector(rec.Package.Builtin)
		archive = c.Path
	}
	if archive == "" {
		return nil // an update that keeps the stored package
	}
	cls := d.ClassName
	what := "Function"
	switch kind {
	case fnconfig.KindSource:
		cls, what = d.Source.ClassName, "Source"
	case fnconfig.KindSink:
		cls, what = d.Sink.ClassName, "Sink"
	}
	if cls == fnconfig.WindowFunctionExecutorClass {
		var uc map[string]any
		json.Unmarshal([]byte(d.UserConfig), &uc)
		if wc, ok := uc[fnconfig.WindowConfigKey].(map[string]any); ok {
			cls, _ = wc["actualWindowFunctionClassName"].(string)
		}
	}
	ok, err := classInArchive(archive, cls)
	if err != nil {
		return errCode(http.StatusBadRequest, "Corrupt package file: %v", err)
	}
	if !ok {
		return errCode(http.StatusBadRequest, "%s class %s must be in class path", what, cls)
	}
	return nil
}

// checkTopics refuses a component whose role may not consume its inputs
// or produce to its outputs (with authorization on).
func (w *Worker) checkTopics(ctx context.Context, role string, d *pb.FunctionDetails) error {
	svc := w.cfg.Broker
	if !svc.AuthzEnabled() || role == broker.InternalRole {
		return nil
	}
	check := func(topic string, action auth.Action, sub string) error {
		tn, err := broker.ParseTopicName(topic)
		if err != nil {
			return errCode(http.StatusBadRequest, "Invalid topic %q: %v", topic, err)
		}
		if err := svc.AuthorizeTopic(ctx, role, action, tn, sub); err != nil {
			var de *auth.DeniedError
			if errors.As(err, &de) {
				return errCode(http.StatusForbidden, "%s may not %s %s", role, action, tn)
			}
			return err
		}
		return nil
	}
	sub := d.Source.GetSubscriptionName()
	if sub == "" {
		sub = d.Tenant + "/" + d.Namespace + "/" + d.Name
	}
	for t, spec := range d.Source.GetInputSpecs() {
		if spec.IsRegexPattern {
			continue
		}
		if err := check(t, auth.ActionConsume, sub); err != nil {
			return err
		}
	}
	for _, t := range []string{d.Sink.GetTopic(), d.LogTopic, d.RetryDetails.GetDeadLetterTopic()} {
		if t == "" {
			continue
		}
		if err := check(t, auth.ActionProduce, ""); err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) deregister(rw http.ResponseWriter, ctx context.Context, kind fnconfig.Kind, t, ns, n string) error {
	rec, _, err := w.getRecord(ctx, kind, t, ns, n)
	if err != nil {
		return err
	}
	if err := w.recs.delete(ctx, kind, t, ns, n); err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return errCode(http.StatusNotFound, "%s %s doesn't exist", kind.Title(), n)
		}
		return err
	}
	w.log.Info("functions: deregistered", "kind", kind, "fqfn", rec.FQFN())
	bg := context.WithoutCancel(ctx)
	w.cleanupSubscriptions(bg, rec)
	if kind == fnconfig.KindFunction {
		if err := w.deleteAllState(bg, t, ns, n); err != nil {
			w.log.Warn("functions: deleting state", "fqfn", rec.FQFN(), "err", err)
		}
	}
	if rec.Package.Digest != "" {
		w.collectPackage(bg, rec.Package.Digest)
	}
	rw.WriteHeader(http.StatusNoContent)
	return nil
}

// cleanupSubscriptions deletes a deleted function's or sink's subscription
// on its input topics when its config asks for it (the default), as
// Pulsar's worker does. It waits for the instances to close their
// consumers first.
func (w *Worker) cleanupSubscriptions(ctx context.Context, rec *Record) {
	d, err := rec.FunctionDetails()
	if err != nil || d.Source == nil || !d.Source.CleanupSubscription || rec.Kind == fnconfig.KindSource {
		return
	}
	sub := d.Source.SubscriptionName
	if sub == "" {
		sub = d.Tenant + "/" + d.Namespace + "/" + d.Name
	}
	for topic, spec := range d.Source.InputSpecs {
		if spec.IsRegexPattern {
			continue
		}
		tn, err := broker.ParseTopicName(topic)
		if err != nil {
			continue
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := w.cfg.Subscriptions.DeleteSubscription(ctx, tn, sub, false)
			if err == nil || time.Now().After(deadline) || isNotFound(err) {
				if err != nil && !isNotFound(err) {
					w.log.Warn("functions: subscription cleanup", "topic", tn, "subscription", sub, "err", err)
				}
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

func isNotFound(err error) bool {
	return errors.Is(err, broker.ErrNotFound) || strings.Contains(strings.ToLower(err.Error()), "not found") ||
		strings.Contains(strings.ToLower(err.Error()), "does not exist")
}

// collectPackage deletes a package no record uses any more.
func (w *Worker) collectPackage(ctx context.Context, digest string) {
	recs, err := w.recs.all(ctx)
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Package.Digest == digest {
			return
		}
	}
	if err := w.cfg.Packages.Delete(ctx, digest); err != nil {
		w.log.Warn("functions: deleting package", "digest", digest, "err", err)
	}
}

func (w *Worker) control(rw http.ResponseWriter, ctx context.Context, kind fnconfig.Kind, t, ns, n string, inst int, op string) error {
	rec, _, err := w.getRecord(ctx, kind, t, ns, n)
	if err != nil {
		return err
	}
	if inst >= rec.Parallelism() {
		return errCode(http.StatusBadRequest, "Invalid instance id %d: %s %s has %d instances", inst, kind, n, rec.Parallelism())
	}
	_, err = w.recs.update(ctx, kind, t, ns, n, func(r *Record) error {
		which := []int{inst}
		if inst < 0 {
			which = which[:0]
			for i := range r.Parallelism() {
				which = append(which, i)
			}
		}
		for _, i := range which {
			switch op {
			case "stop":
				if !r.isStopped(i) {
					r.Stopped = append(r.Stopped, i)
				}
			case "start":
				r.Stopped = slices.DeleteFunc(r.Stopped, func(x int) bool { return x == i })
			case "restart":
				if r.Restarts == nil {
					r.Restarts = map[int]int64{}
				}
				r.Restarts[i]++
			}
		}
		slices.Sort(r.Stopped)
		return nil
	})
	if err != nil {
		return err
	}
	rw.WriteHeader(http.StatusNoContent)
	return nil
}

func (w *Worker) download(rw http.ResponseWriter, ctx context.Context, kind fnconfig.Kind, t, ns, n string) error {
	rec, _, err := w.getRecord(ctx, kind, t, ns, n)
	if err != nil {
		return err
	}
	path, err := w.localPackage(ctx, rec)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rw.Header().Set("Content-Type", "application/octet-stream")
	rw.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", filepath.Base(path)))
	rw.WriteHeader(http.StatusOK)
	io.Copy(rw, f)
	return nil
}

// workerAPI serves /admin/v2/worker: the workers, the scheduler's leader
// and the assignment.
func (w *Worker) workerAPI(rw http.ResponseWriter, r *http.Request, seg []string) error {
	ctx := r.Context()
	if r.Method != http.MethodGet || len(seg) < 2 {
		return errCode(http.StatusNotFound, "Not found")
	}
	switch strings.Join(seg, "/") {
	case "worker/cluster":
		ws, err := w.liveWorkers(ctx)
		if err != nil {
			return err
		}
		if ws == nil {
			ws = []WorkerInfo{}
		}
		writeJSON(rw, http.StatusOK, ws)
	case "worker/cluster/leader":
		ws, err := w.liveWorkers(ctx)
		if err != nil {
			return err
		}
		leader := w.leaderID(ctx)
		for _, wi := range ws {
			if wi.ID == leader {
				writeJSON(rw, http.StatusOK, wi)
				return nil
			}
		}
		return errCode(http.StatusServiceUnavailable, "no function scheduler is elected")
	case "worker/cluster/leader/ready":
		writeJSON(rw, http.StatusOK, w.leaderID(ctx) != "")
	case "worker/assignments":
		a, _, err := w.readAssignment(ctx)
		if err != nil {
			return err
		}
		out := map[string][]string{}
		for inst, wid := range a.Instances {
			_, t, ns, n, i, ok := parseInstanceKey(inst)
			if ok {
				out[wid] = append(out[wid], fmt.Sprintf("%s/%s/%s:%d", t, ns, n, i))
			}
		}
		for _, v := range out {
			slices.Sort(v)
		}
		writeJSON(rw, http.StatusOK, out)
	case "worker/connectors":
		writeJSON(rw, http.StatusOK, w.builtinConnectors("connectors"))
	default:
		return errCode(http.StatusNotFound, "Not found")
	}
	return nil
}

// leaderID is the elected scheduler's worker id ("" when none).
func (w *Worker) leaderID(ctx context.Context) string {
	w.mu.Lock()
	sess := w.sess
	w.mu.Unlock()
	if sess == nil {
		return ""
	}
	kv, err := sess.Leader(ctx, w.cfg.Root+"/leader")
	if err != nil {
		return ""
	}
	return string(kv.Value)
}
