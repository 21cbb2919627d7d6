package policy

import (
	"bytes"
	"context"
	"io/fs"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"

	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestRegoUnitTests runs policy/rego/*_test.rego with OPA's test runner over
// the embedded policies and default data, as `opa test` would.
func TestRegoUnitTests(t *testing.T) {
	modules, err := loadModules(regoFS, true)
	if err != nil {
		t.Fatal(err)
	}
	data, err := defaultData()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	ch, err := tester.NewRunner().
		SetModules(modules).
		SetStore(inmem.NewFromObject(data)).
		SetParallel(1).
		SetTimeout(time.Minute).
		RunTests(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for r := range ch {
		n++
		if r.Pass() {
			t.Logf("%s.%s: PASS", r.Package, r.Name)
			continue
		}
		t.Errorf("%s (%s:%d)\n%s", r.String(), r.Location.File, r.Location.Row, string(r.Output))
		if r.Error != nil {
			t.Errorf("%s.%s: %v", r.Package, r.Name, r.Error)
		}
	}
	if n == 0 {
		t.Fatal("no Rego tests ran")
	}
	t.Logf("%d Rego tests", n)
}

// TestRegoFormatted keeps the policies in `opa fmt` form.
func TestRegoFormatted(t *testing.T) {
	entries, err := fs.ReadDir(regoFS, regoDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		if !strings.HasSuffix(ent.Name(), ".rego") {
			continue
		}
		p := path.Join(regoDir, ent.Name())
		src, err := fs.ReadFile(regoFS, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := format.SourceWithOpts(p, src, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !bytes.Equal(got, src) {
			t.Errorf("%s is not formatted like `opa fmt` would:\n%s", p, got)
		}
	}
}
