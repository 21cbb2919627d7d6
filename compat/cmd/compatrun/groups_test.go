package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The milestone sizes of the notes (§13) for pulsar-client-go v0.19.0.
func TestGroupSizes(t *testing.T) {
	want := map[string]int{"M1": 53, "M2": 21, "M3": 38, "M4": 37, "M5": 50, "M6": 32, "M7": 9, "M8": 13, "X": 5}
	for id, n := range want {
		if got := len(pulsarGroups[id]); got != n {
			t.Errorf("%s has %d tests, want %d", id, got, n)
		}
		if _, ok := groupByID(id); !ok {
			t.Errorf("%s is not in groups", id)
		}
	}
	for id := range pulsarGroups {
		if _, ok := want[id]; !ok {
			t.Errorf("unexpected group %s", id)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct{ pkg, name, want string }{
		{pkgPulsar, "TestProducerConsumer", "M1"},
		{pkgPulsar, "TestTxn_TCClient", "M7"},
		{pkgPulsar, "TestReconnectConsumer", "X"},
		{pkgPulsar, "TestTLSConnectionCAError", "M6"},
		{pkgPulsar, "TestHTTPSAuthError", "M6"},
		{pkgPulsar, "TestSomethingUnlisted", "M0"},
		{pkgAdmin, "TestProducerConsumer", "M9"},
	} {
		if got := classify(tc.pkg, tc.name); got != tc.want {
			t.Errorf("classify(%s, %s) = %s, want %s", tc.pkg, tc.name, got, tc.want)
		}
	}
}

// TestSecureTestsInM6 reads the upstream ./pulsar tests (the version in
// go.mod, the one the table names) and checks that every test about TLS
// or authentication runs against the secured broker: a test whose name
// says so or whose body dials a TLS URL, reads the suite's certificates or
// token, or builds an authentication provider is in M6 (M7, transactions,
// also uses TLS). In M0 such a test would meet a broker without TLS
// listeners, and a refused connection passes the negative ones.
func TestSecureTestsInM6(t *testing.T) {
	// Tests that configure a TLS client but never dial it.
	neverDial := map[string]bool{
		// NewTransaction fails with ErrClientTransactionsNotEnabled, which
		// the test asserts, before any request.
		"TestTxn_NoTransactionCoordinator": true,
	}
	out, err := exec.Command("go", "list", "-m", "-json", "github.com/apache/pulsar-client-go").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/apache/pulsar-client-go: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("no module directory for pulsar-client-go (run go mod download): %s", out)
	}
	files, err := filepath.Glob(filepath.Join(mod.Dir, "pulsar", "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in %s/pulsar: %v", mod.Dir, err)
	}
	name := regexp.MustCompile(`TLS|HTTPS|Auth|Token|Basic`)
	secureIdents := map[string]bool{
		"serviceURLTLS": true, "webServiceURLTLS": true, "caCertsPath": true,
		"tlsClientCertPath": true, "tlsClientKeyPath": true, "tokenFilePath": true,
	}
	secureLit := regexp.MustCompile(`pulsar\+ssl://|https://[^/]*:8443|:6651`)
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if taggedFile(t, f) {
			continue // M10: not in pulsar.test
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			why := ""
			if name.MatchString(fn.Name.Name) {
				why = "its name"
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					if secureIdents[n.Name] || strings.HasPrefix(n.Name, "NewAuthentication") {
						why = n.Name
					}
				case *ast.BasicLit:
					if s, err := strconv.Unquote(n.Value); err == nil && secureLit.MatchString(s) {
						why = strconv.Quote(s)
					}
				}
				return why == ""
			})
			if why == "" || neverDial[fn.Name.Name] {
				continue
			}
			checked++
			if g := classify(pkgPulsar, fn.Name.Name); g != "M6" && g != "M7" {
				t.Errorf("%s (%s) is in %s, want M6: it needs TLS or authentication (%s)",
					fn.Name.Name, filepath.Base(f), g, why)
			}
		}
	}
	if checked < len(pulsarGroups["M6"]) {
		t.Errorf("found %d TLS/authentication tests upstream, fewer than M6's %d: is the scan broken?", checked, len(pulsarGroups["M6"]))
	}
}

// taggedFile reports whether a Go file is built only with the clustered or
// extensible_load_manager tag.
func taggedFile(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if buildTagRE.MatchString(sc.Text()) {
			return true
		}
		if strings.HasPrefix(sc.Text(), "package ") {
			return false
		}
	}
	return false
}

func TestParseGroups(t *testing.T) {
	def, err := parseGroups("")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"M0", "M1", "M2", "M3", "M4", "M5", "M8", "M9"} {
		if !def[id] {
			t.Errorf("default lacks %s", id)
		}
	}
	for _, id := range []string{"M7", "M10", "X"} {
		if def[id] {
			t.Errorf("default has excluded %s", id)
		}
	}
	got, err := parseGroups("m1, M6")
	if err != nil || len(got) != 2 || !got["M1"] || !got["M6"] {
		t.Fatalf("parseGroups(m1, M6) = %v, %v", got, err)
	}
	if _, err := parseGroups("M42"); err == nil {
		t.Fatal("unknown group accepted")
	}
}

func TestReportCountsAndTarget(t *testing.T) {
	all := []testCase{
		{pkgPulsar, "TestA", "M1"}, {pkgPulsar, "TestB", "M1"}, {pkgPulsar, "TestTxn", "M7"},
		{pkgAdmin, "TestC", "M9"},
	}
	r := &run{
		Started: time.Unix(0, 0), Finished: time.Unix(60, 0), Groups: []string{"M1", "M9"},
		Results: []result{
			{testCase: all[0], Status: statusPass},
			{testCase: all[1], Status: statusFail, Reason: "a_test.go:1: x | y", Hint: "server error"},
			{testCase: all[3], Status: statusSkip},
		},
	}
	var b bytes.Buffer
	writeReport(&b, r, all)
	s := b.String()
	for _, want := range []string{
		"| M1 | core produce/consume | 2 | 1 | 1 | 0 | 0 |",
		"| M7 | transactions — *not run: needs transactions (and TLS on 8443)* | 1 | 0 | 0 | 0 | 1 |",
		"| M9 | pulsaradmin/pkg/admin | 1 | 0 | 0 | 1 | 0 |",
		"**1 of 3 pass (33.3%)**; 1 fail, 1 skip, 0 not run.",
		"groups M0, M1, M2, M3, M4, M5, M6, M8 and M9: every group a default run covers, TLS and authentication (M6)\nincluded. M7, M10 and X are not run and do not count.\n**1 of 3",
		`| TestB | M1 | a_test.go:1: x \| y | server error |`,
		"`TestTxn`",
		"| admin.TestC | skip |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q\n%s", want, s)
		}
	}
	if strings.Contains(s, "vacuous") {
		t.Errorf("report says some tests pass vacuously\n%s", s)
	}
}

// TestReportKeepsOtherClients: rewriting the report file keeps the part
// from keepMarker on and drops the rest of the old report.
func TestReportKeepsOtherClients(t *testing.T) {
	path := filepath.Join(t.TempDir(), "compatibility.md")
	tail := keepMarker + "\n\n# Other clients\n\n| Test | Result |\n"
	if err := os.WriteFile(path, []byte("# old report\n\nstale\n\n"+tail), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &run{Started: time.Now(), Finished: time.Now()}
	if err := writeReportFile(path, r, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.Contains(got, "stale") || !strings.HasSuffix(got, "\n"+tail) ||
		!strings.HasPrefix(got, "# Compatibility with the Apache Pulsar Go client's test suite") {
		t.Fatalf("report file:\n%s", got)
	}
	if keptTail([]byte("no marker")) != nil {
		t.Fatal("a file without the marker keeps something")
	}
}
