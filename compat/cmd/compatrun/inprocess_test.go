package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseBatch: one process ran several tests; each gets its own
// verdict and reason, and the tests after one that ended the process are
// not run, with where it ended.
func TestParseBatch(t *testing.T) {
	tests := []testCase{
		{pkgPulsar, "TestA", "M5"}, {pkgPulsar, "TestB", "M5"}, {pkgPulsar, "TestC", "M5"},
		{pkgPulsar, "TestD", "M5"},
	}
	exit2 := errors.New("exit status 2")
	cases := []struct {
		name    string
		out     string
		err     error
		killed  bool
		status  []string
		reasons []string // substrings; "" means empty
	}{
		{
			name: "panic after a failed assertion",
			out: strings.Join([]string{
				"=== RUN   TestA",
				"=== RUN   TestA/sub",
				"--- PASS: TestA (1.50s)",
				"    --- PASS: TestA/sub (0.50s)",
				"=== RUN   TestB",
				`time="x" level=error msg="Failed to create consumer" error="server error: IncompatibleSchema: definitions differ"`,
				"    schema_test.go:320: ",
				"        \tError Trace:\t/w/pulsar/schema_test.go:320",
				"        \tError:      \tExpected nil, but got: server error: IncompatibleSchema: definitions differ",
				"        \tTest:       \tTestB",
				"--- FAIL: TestB (0.01s)",
				"panic: runtime error: invalid memory address or nil pointer dereference [recovered, repanicked]",
				"",
				"goroutine 7 [running]:",
				"github.com/apache/pulsar-client-go/pulsar.TestB(0x1)",
				"\t/w/pulsar/schema_test.go:322 +0x49f",
				"FAIL\tgithub.com/apache/pulsar-client-go/pulsar\t3.1s",
			}, "\n"),
			err:     exit2,
			status:  []string{statusPass, statusFail, statusNotRun, statusNotRun},
			reasons: []string{"", "schema_test.go:320: Expected nil, but got: server error: IncompatibleSchema", "the process panicked in TestB", "the process panicked in TestB"},
		},
		{
			name: "timeout",
			out: strings.Join([]string{
				"=== RUN   TestA",
				"    a_test.go:9: not here",
				"--- SKIP: TestA (0.00s)",
				"=== RUN   TestB",
				"--- PASS: TestB (2.00s)",
				"=== RUN   TestC",
				"panic: test timed out after 20m0s",
				"\trunning tests:",
				"\t\tTestC (19m58s)",
				"",
				"goroutine 9 [chan receive, 19 minutes]:",
				"github.com/apache/pulsar-client-go/pulsar.(*consumer).Receive(0x1)",
				"\t/w/pulsar/consumer_impl.go:100 +0x1",
				"github.com/apache/pulsar-client-go/pulsar.TestC(0x2)",
				"\t/w/pulsar/c_test.go:77 +0x2",
			}, "\n"),
			err:     exit2,
			status:  []string{statusSkip, statusPass, statusFail, statusNotRun},
			reasons: []string{"a_test.go:9: not here", "", "timed out after 20m0s: test blocked [chan receive] at c_test.go:77", "the process timed out in TestC"},
		},
		{
			name: "all pass",
			out: "=== RUN   TestA\n--- PASS: TestA (0.10s)\n=== RUN   TestB\n--- PASS: TestB (0.20s)\n" +
				"=== RUN   TestC\n--- PASS: TestC (0.30s)\n=== RUN   TestD\n--- PASS: TestD (0.40s)\nPASS\n",
			status:  []string{statusPass, statusPass, statusPass, statusPass},
			reasons: []string{"", "", "", ""},
		},
		{
			name:    "killed",
			out:     "=== RUN   TestA\n--- PASS: TestA (0.10s)\n=== RUN   TestB\n",
			err:     errors.New("signal: killed"),
			killed:  true,
			status:  []string{statusPass, statusFail, statusNotRun, statusNotRun},
			reasons: []string{"", "killed by the runner", "the runner killed the process in TestB", "the runner killed the process in TestB"},
		},
	}
	for _, c := range cases {
		got := parseBatch(tests, c.out, c.err, c.killed)
		for i, o := range got {
			if o.status != c.status[i] {
				t.Errorf("%s: %s status = %q, want %q (reason %q)", c.name, tests[i].Name, o.status, c.status[i], o.reason)
			}
			if (c.reasons[i] == "") != (o.reason == "") || !strings.Contains(o.reason, c.reasons[i]) {
				t.Errorf("%s: %s reason = %q, want %q", c.name, tests[i].Name, o.reason, c.reasons[i])
			}
		}
	}
	got := parseBatch(tests, cases[0].out, exit2, false)
	if got[0].duration != 1500*time.Millisecond {
		t.Errorf("TestA took %v, want 1.5s", got[0].duration)
	}
	if !strings.Contains(got[1].hint, "IncompatibleSchema") {
		t.Errorf("TestB hint = %q", got[1].hint)
	}
}

// TestReportInProcess: a run of both modes reports both figures, the
// processes and each test's result in both.
func TestReportInProcess(t *testing.T) {
	all := []testCase{{pkgPulsar, "TestA", "M5"}, {pkgPulsar, "TestB", "M5"}, {pkgPulsar, "TestC", "M5"}}
	r := &run{
		Started: time.Unix(0, 0), Finished: time.Unix(60, 0), Groups: []string{"M5"},
		Modes: []string{modeEach, modeGroup}, GroupTimeout: 20 * time.Minute,
		Results: []result{
			{testCase: all[0], Status: statusPass}, {testCase: all[1], Status: statusPass}, {testCase: all[2], Status: statusPass},
		},
		Processes: []processRun{{Group: "M5", Pkg: pkgPulsar, Tests: 3, Exit: "exit status 2", Duration: 3 * time.Second}},
		InProcess: []result{
			{testCase: all[0], Status: statusPass},
			{testCase: all[1], Status: statusFail, Reason: "schema_test.go:320: Expected nil"},
			{testCase: all[2], Status: statusNotRun, Reason: "the process panicked in TestB"},
		},
	}
	var b bytes.Buffer
	writeReport(&b, r, all)
	s := b.String()
	for _, want := range []string{
		"| M5 | schema, chunking, encryption, table view | 3 | 3 | 0 | 0 | 0 | 1 | 1 | 1 |",
		"One at a time: **3 of 3 pass (100.0%)**",
		"In one process per group: **1 of 3 pass (33.3%)**; 1 fail, 0 skip, 1 not run.",
		"| M5 | pulsar | 3 | exit status 2 | fine | 3s |",
		"| TestB | M5 | schema_test.go:320: Expected nil |  |",
		"| TestB | pass | fail |",
		"| TestC | pass | not run (the process panicked in TestB) |",
		"-test.timeout 20m0s` per group",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q\n%s", want, s)
		}
	}
}
