package policy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/magnetar-dev/magnetar/policy/roles"
)

// TestRolesAgree keeps one list of roles: the roles the policies name are
// exactly roles.All (each grants something, none is granted that the API
// refuses to bind), the table of docs/security.md lists the same roles in
// the same order, and every role the docs and the README mention is one
// of them.
func TestRolesAgree(t *testing.T) {
	want := roles.Names()

	modules, err := loadModules(regoFS, false)
	if err != nil {
		t.Fatal(err)
	}
	inPolicy := map[string]bool{}
	for _, m := range modules {
		ast.WalkTerms(m, func(term *ast.Term) bool {
			if s, ok := term.Value.(ast.String); ok && strings.HasPrefix(string(s), "roles/") {
				inPolicy[string(s)] = true
			}
			return false
		})
	}
	for _, r := range want {
		if !inPolicy[r] {
			t.Errorf("role %s is in policy/roles but the policies grant it nothing", r)
		}
	}
	for r := range inPolicy {
		if !roles.Known(r) {
			t.Errorf("the policies name role %s, which policy/roles (and so the API) does not have", r)
		}
	}

	root := filepath.Join("..")
	raw, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Control-plane roles\n")
	if !ok {
		t.Fatal("docs/security.md has no section \"## Control-plane roles\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var table []string
	for _, line := range strings.Split(section, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `roles/"); ok {
			name, _, _ := strings.Cut(rest, "`")
			table = append(table, "roles/"+name)
		}
	}
	if !slices.Equal(table, want) {
		t.Errorf("docs/security.md's table of roles lists %v, want %v", table, want)
	}

	mention := regexp.MustCompile("roles/[a-z]+(\\.[a-z]+)?(\\.\\*)?")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mention.FindAllString(string(raw), -1) {
			if strings.HasSuffix(m, ".*") {
				continue // a family of roles, e.g. roles/pulsar.*
			}
			if !roles.Known(m) {
				t.Errorf("%s mentions role %s, which is not in policy/roles", f, m)
			}
		}
	}
}
