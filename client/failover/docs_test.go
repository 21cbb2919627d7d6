package failover_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestDocsAuthenticatedExample: the Go fragment docs/client-failover.md
// shows for authenticated groups is the body of
// ExampleNewControlled_authenticated, which the tests compile.
func TestDocsAuthenticatedExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "ExampleNewControlled_authenticated" {
			// The statements between the braces, one tab less indented.
			text := string(src[fset.Position(fn.Body.Lbrace).Offset+2 : fset.Position(fn.Body.Rbrace).Offset])
			var lines []string
			for _, l := range strings.Split(text, "\n") {
				lines = append(lines, strings.TrimPrefix(l, "\t"))
			}
			body = strings.Join(lines, "\n")
		}
	}
	if body == "" {
		t.Fatal("example_test.go has no ExampleNewControlled_authenticated")
	}
	page, err := os.ReadFile("../../docs/client-failover.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```go\n"+body+"```\n") {
		t.Fatalf("docs/client-failover.md has no go block with the body of ExampleNewControlled_authenticated:\n%s", body)
	}
}
