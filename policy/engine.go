package policy

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// regoFS holds the policies (rego/*.rego), their unit tests
// (rego/*_test.rego, not loaded by the Engine) and the default data document
// (rego/data.json).
//
//go:embed rego
var regoFS embed.FS

const (
	regoDir      = "rego"
	dataFile     = "rego/data.json"
	queryAllow   = "data.magnetar.authz.allow"
	queryReasons = "data.magnetar.authz.reasons"
	queryDeny    = "data.magnetar.admission.deny"
	queryActions = "data.magnetar.actions.known"
	queryOpOnly  = "data.magnetar.actions.operator_only"
)

// Admission codes, most severe first: a malformed request is reported before
// the organization's settings, and those before its quotas.
const (
	CodeInvalidArgument    = "INVALID_ARGUMENT"
	CodeFailedPrecondition = "FAILED_PRECONDITION"
	CodeResourceExhausted  = "RESOURCE_EXHAUSTED"
)

var codeSeverity = map[string]int{
	CodeInvalidArgument:    0,
	CodeFailedPrecondition: 1,
	CodeResourceExhausted:  2,
}

// ErrEvaluation wraps every failure to evaluate a policy. Callers must treat
// it as a denial (fail closed).
var ErrEvaluation = errors.New("policy: evaluation failed")

// Engine evaluates the embedded policies. It is safe for concurrent use by
// any number of goroutines; it starts none.
type Engine struct {
	log     *slog.Logger
	allow   rego.PreparedEvalQuery
	reasons rego.PreparedEvalQuery
	deny    rego.PreparedEvalQuery
	actions []string
	// operatorOnly are the actions reserved to operators.
	operatorOnly map[string]bool
	// The data-plane policy (pulsar.go).
	pulsarAllow, pulsarReasons rego.PreparedEvalQuery
}

type config struct {
	data   []map[string]any
	log    *slog.Logger
	errors []error
}

// Option configures an Engine.
type Option func(*config)

// WithData merges doc over the embedded default data document (rooted at
// OPA's `data`, e.g. {"magnetar": {"limits": {"max_clusters": 10}}}). Objects
// are merged key by key; any other value replaces the default. doc is a
// map[string]any or a JSON object as []byte, json.RawMessage or string.
// Several WithData options apply in order.
func WithData(doc any) Option {
	return func(c *config) {
		var raw []byte
		switch d := doc.(type) {
		case map[string]any:
			// Round-trip so the store only ever sees JSON types.
			b, err := json.Marshal(d)
			if err != nil {
				c.errors = append(c.errors, fmt.Errorf("policy: WithData: %w", err))
				return
			}
			raw = b
		case json.RawMessage:
			raw = d
		case []byte:
			raw = d
		case string:
			raw = []byte(d)
		default:
			c.errors = append(c.errors, fmt.Errorf("policy: WithData: unsupported type %T", doc))
			return
		}
		m, err := decodeObject(raw)
		if err != nil {
			c.errors = append(c.errors, fmt.Errorf("policy: WithData: %w", err))
			return
		}
		c.data = append(c.data, m)
	}
}

// WithLogger sets the logger; denials are logged at debug level. The default
// is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// New compiles the embedded policies and prepares their queries once.
func New(opts ...Option) (*Engine, error) {
	cfg := config{log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if err := errors.Join(cfg.errors...); err != nil {
		return nil, err
	}

	modules, err := loadModules(regoFS, false)
	if err != nil {
		return nil, err
	}
	data, err := defaultData()
	if err != nil {
		return nil, err
	}
	for _, d := range cfg.data {
		data = mergeObjects(data, d)
	}
	store := inmem.NewFromObjectWithOpts(data, inmem.OptReturnASTValuesOnRead(true))

	compiler := ast.NewCompiler().WithEnablePrintStatements(false)
	compiler.Compile(modules)
	if compiler.Failed() {
		return nil, fmt.Errorf("policy: compile: %w", compiler.Errors)
	}

	ctx := context.Background()
	prepare := func(query string) (rego.PreparedEvalQuery, error) {
		pq, err := rego.New(
			rego.Query(query),
			rego.Compiler(compiler),
			rego.Store(store),
		).PrepareForEval(ctx)
		if err != nil {
			return pq, fmt.Errorf("policy: prepare %s: %w", query, err)
		}
		return pq, nil
	}
	e := &Engine{log: cfg.log}
	if e.allow, err = prepare(queryAllow); err != nil {
		return nil, err
	}
	if e.reasons, err = prepare(queryReasons); err != nil {
		return nil, err
	}
	if e.deny, err = prepare(queryDeny); err != nil {
		return nil, err
	}
	if e.pulsarAllow, err = prepare(queryPulsarAllow); err != nil {
		return nil, err
	}
	if e.pulsarReasons, err = prepare(queryPulsarReasons); err != nil {
		return nil, err
	}
	known, err := prepare(queryActions)
	if err != nil {
		return nil, err
	}
	rs, err := known.Eval(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy: list actions: %w", err)
	}
	for _, v := range firstArray(rs) {
		if s, ok := v.(string); ok {
			e.actions = append(e.actions, s)
		}
	}
	sort.Strings(e.actions)
	opOnly, err := prepare(queryOpOnly)
	if err != nil {
		return nil, err
	}
	if rs, err = opOnly.Eval(ctx); err != nil {
		return nil, fmt.Errorf("policy: list operator-only actions: %w", err)
	}
	e.operatorOnly = map[string]bool{}
	for _, v := range firstArray(rs) {
		if s, ok := v.(string); ok {
			e.operatorOnly[s] = true
		}
	}
	return e, nil
}

// Actions returns the actions the policy knows ("clusters.create", ...),
// sorted. Non-operators are denied every other action. The caller may keep
// the slice; it is a copy.
func (e *Engine) Actions() []string {
	return append([]string(nil), e.actions...)
}

// Decide authorizes in (data.magnetar.authz) and, if that allows it, admits
// it (data.magnetar.admission). On error the Decision is a denial and the
// error wraps ErrEvaluation.
func (e *Engine) Decide(ctx context.Context, in Input) (Decision, error) {
	input := inputValue(&in)

	rs, err := e.allow.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil {
		return Decision{}, fmt.Errorf("%w: authz: %w", ErrEvaluation, err)
	}
	allowed, ok := firstBool(rs)
	if !ok {
		return Decision{}, fmt.Errorf("%w: authz: allow is not a boolean", ErrEvaluation)
	}
	if !allowed {
		d := Decision{Denied: true, OperatorOnly: in.Principal.Kind != "operator" && e.operatorOnly[in.Action]}
		rs, err := e.reasons.Eval(ctx, rego.EvalParsedInput(input))
		if err != nil {
			return Decision{Denied: true}, fmt.Errorf("%w: authz reasons: %w", ErrEvaluation, err)
		}
		for _, r := range firstArray(rs) {
			if s, ok := r.(string); ok {
				d.Reasons = append(d.Reasons, s)
			}
		}
		if len(d.Reasons) == 0 {
			d.Reasons = []string{"permission denied"}
		}
		sort.Strings(d.Reasons)
		e.logDenial(ctx, &in, d)
		return d, nil
	}

	rs, err = e.deny.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil {
		return Decision{}, fmt.Errorf("%w: admission: %w", ErrEvaluation, err)
	}
	denies := firstArray(rs)
	if len(denies) == 0 {
		return Decision{Allow: true}, nil
	}
	d := Decision{Reasons: make([]string, 0, len(denies))}
	best := len(codeSeverity) + 1
	for _, v := range denies {
		obj, ok := v.(map[string]any)
		if !ok {
			return Decision{}, fmt.Errorf("%w: admission: deny entry is %T, not an object", ErrEvaluation, v)
		}
		code, _ := obj["code"].(string)
		msg, _ := obj["message"].(string)
		if code == "" || msg == "" {
			return Decision{}, fmt.Errorf("%w: admission: deny entry lacks code or message", ErrEvaluation)
		}
		sev, known := codeSeverity[code]
		if !known {
			sev = len(codeSeverity)
		}
		if sev < best || (sev == best && code < d.Code) {
			best, d.Code = sev, code
		}
		d.Reasons = append(d.Reasons, msg)
	}
	sort.Strings(d.Reasons)
	e.logDenial(ctx, &in, d)
	return d, nil
}

func (e *Engine) logDenial(ctx context.Context, in *Input, d Decision) {
	if !e.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	e.log.LogAttrs(ctx, slog.LevelDebug, "policy denied request",
		slog.String("principal", in.Principal.Name),
		slog.String("action", in.Action),
		slog.String("resource", in.Resource.Name),
		slog.Bool("authz", d.Denied),
		slog.String("code", d.Code),
		slog.Any("reasons", d.Reasons),
	)
}

// firstBool returns the value of a single-expression query's first result.
func firstBool(rs rego.ResultSet) (bool, bool) {
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return false, false
	}
	b, ok := rs[0].Expressions[0].Value.(bool)
	return b, ok
}

// firstArray returns a set or array result as a slice; nil when undefined.
func firstArray(rs rego.ResultSet) []any {
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil
	}
	a, _ := rs[0].Expressions[0].Value.([]any)
	return a
}

// loadModules parses the policies in fsys's rego directory: the policies
// themselves, plus the *_test.rego files when withTests is set.
func loadModules(fsys fs.FS, withTests bool) (map[string]*ast.Module, error) {
	entries, err := fs.ReadDir(fsys, regoDir)
	if err != nil {
		return nil, fmt.Errorf("policy: read policies: %w", err)
	}
	modules := make(map[string]*ast.Module)
	for _, ent := range entries {
		name := ent.Name()
		if ent.IsDir() || !strings.HasSuffix(name, ".rego") {
			continue
		}
		if strings.HasSuffix(name, "_test.rego") && !withTests {
			continue
		}
		p := path.Join(regoDir, name)
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("policy: read %s: %w", p, err)
		}
		m, err := ast.ParseModuleWithOpts(p, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, fmt.Errorf("policy: parse %s: %w", p, err)
		}
		modules[p] = m
	}
	if len(modules) == 0 {
		return nil, errors.New("policy: no policies embedded")
	}
	return modules, nil
}

// defaultData returns a fresh copy of the embedded data document.
func defaultData() (map[string]any, error) {
	raw, err := regoFS.ReadFile(dataFile)
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", dataFile, err)
	}
	m, err := decodeObject(raw)
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", dataFile, err)
	}
	return m, nil
}

func decodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("data is not a JSON object: %w", err)
	}
	if m == nil {
		return nil, errors.New("data is not a JSON object")
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return m, nil
}

// mergeObjects merges over into base (which it modifies and returns): nested
// objects merge, anything else in over replaces base's value.
func mergeObjects(base, over map[string]any) map[string]any {
	for k, ov := range over {
		if om, ok := ov.(map[string]any); ok {
			if bm, ok := base[k].(map[string]any); ok {
				base[k] = mergeObjects(bm, om)
				continue
			}
		}
		base[k] = ov
	}
	return base
}
