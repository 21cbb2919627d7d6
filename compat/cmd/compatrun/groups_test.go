package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The milestone sizes of the notes (§13) for pulsar-client-go v0.19.0.
func TestGroupSizes(t *testing.T) {
	want := map[string]int{"M1": 53, "M2": 21, "M3": 38, "M4": 37, "M5": 50, "M6": 25, "M7": 9, "M8": 13, "X": 5}
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
		{pkgPulsar, "TestSomethingUnlisted", "M0"},
		{pkgAdmin, "TestProducerConsumer", "M9"},
	} {
		if got := classify(tc.pkg, tc.name); got != tc.want {
			t.Errorf("classify(%s, %s) = %s, want %s", tc.pkg, tc.name, got, tc.want)
		}
	}
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
		`| TestB | M1 | a_test.go:1: x \| y | server error |`,
		"`TestTxn`",
		"| admin.TestC | skip |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q\n%s", want, s)
		}
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
