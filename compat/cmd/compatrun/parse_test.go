package main

import (
	"errors"
	"strings"
	"testing"
)

func TestParseOutput(t *testing.T) {
	exit1 := errors.New("exit status 1")
	tests := []struct {
		name   string
		out    string
		err    error
		killed bool
		status string
		reason string // substring; "" means empty
		hint   string // substring
	}{
		{
			name:   "pass",
			out:    "=== RUN   TestA\n--- PASS: TestA (0.01s)\nPASS\n",
			status: statusPass,
		},
		{
			name:   "skip",
			out:    "=== RUN   TestA\n    a_test.go:9: not on this platform\n--- SKIP: TestA (0.00s)\nPASS\n",
			status: statusSkip,
			reason: "a_test.go:9: not on this platform",
		},
		{
			name: "testify",
			out: strings.Join([]string{
				"=== RUN   TestA",
				`time="2026-01-01T00:00:00Z" level=warning msg="Failed to create producer" error="server error: ServiceNotReady: no" topic=x`,
				"    a_test.go:42: ",
				"        \tError Trace:\t/w/pulsar/a_test.go:42",
				"        \tError:      \tReceived unexpected error:",
				"        \t            \tserver error: ServiceNotReady: no",
				"        \tTest:       \tTestA",
				"        \tMessages:   \tshould not happen",
				"--- FAIL: TestA (1.00s)",
				"FAIL",
			}, "\n"),
			err:    exit1,
			status: statusFail,
			reason: "a_test.go:42: Received unexpected error: server error: ServiceNotReady: no",
			hint:   "Failed to create producer; error: server error: ServiceNotReady: no",
		},
		{
			name: "testify messages",
			out: strings.Join([]string{
				"    a_test.go:7: ",
				"        \tError Trace:\t/w/pulsar/a_test.go:7",
				"        \tError:      \tShould be true",
				"        \tMessages:   \twant 10 got 3",
				"        \tTest:       \tTestA",
				"--- FAIL: TestA (1.00s)",
			}, "\n"),
			err:    exit1,
			status: statusFail,
			reason: "a_test.go:7: Should be true Messages: want 10 got 3",
		},
		{
			name:   "t.Fatalf",
			out:    "=== RUN   TestA\n    b_test.go:3: expected 5 messages\n        got 4\n--- FAIL: TestA (0.10s)\nFAIL\n",
			err:    exit1,
			status: statusFail,
			reason: "b_test.go:3: expected 5 messages got 4",
		},
		{
			name: "timeout",
			out: strings.Join([]string{
				"=== RUN   TestA",
				`{"time":"x","level":"WARN","msg":"Reconnecting","error":"EOF"}`,
				"panic: test timed out after 1m0s",
				"\trunning tests:",
				"\t\tTestA (1m0s)",
				"",
				"goroutine 9 [select, 1 minutes]:",
				"github.com/apache/pulsar-client-go/pulsar.(*consumer).Receive(0xc0, {0x1, 0x2})",
				"\t/w/pulsar/consumer_impl.go:500 +0x1",
				"github.com/apache/pulsar-client-go/pulsar.TestA(0xc0)",
				"\t/w/pulsar/a_test.go:77 +0x2",
				"testing.tRunner(0xc0, 0x1)",
				"\t/usr/local/go/src/testing/testing.go:2036 +0x21d",
			}, "\n"),
			err:    errors.New("exit status 2"),
			status: statusFail,
			reason: "timed out after 1m0s: test blocked [select] at a_test.go:77 in pulsar.(*consumer).Receive",
			hint:   "Reconnecting; error: EOF",
		},
		{
			name: "panic",
			out: strings.Join([]string{
				"=== RUN   TestA",
				"--- FAIL: TestA (0.00s)",
				"panic: runtime error: invalid memory address or nil pointer dereference [recovered]",
				"goroutine 7 [running]:",
				"testing.tRunner.func1.2({0x1, 0x2})",
				"\t/usr/local/go/src/testing/testing.go:1734 +0x21c",
				"github.com/apache/pulsar-client-go/pulsar.TestA(0xc0)",
				"\t/w/pulsar/a_test.go:12 +0x2",
			}, "\n"),
			err:    errors.New("exit status 2"),
			status: statusFail,
			reason: "panic: runtime error: invalid memory address or nil pointer dereference [recovered] at pulsar/a_test.go:12",
		},
		{
			name:   "killed",
			out:    "=== RUN   TestA\n",
			err:    errors.New("signal: killed"),
			killed: true,
			status: statusFail,
			reason: "killed by the runner",
		},
		{
			name:   "pass verdict but bad exit (race detected after)",
			out:    "--- PASS: TestA (0.01s)\nWARNING: DATA RACE\nRead at 0x00 by goroutine 8:\n  x.f()\n\t/w/pulsar/internal/c.go:10 +0x1\nFAIL\n",
			err:    exit1,
			status: statusFail,
			reason: "data race: internal/c.go:10",
		},
		{
			name:   "subtest verdict is not the test's",
			out:    "=== RUN   TestA\n=== RUN   TestA/sub\n        a_test.go:5: boom\n    --- FAIL: TestA/sub (0.00s)\n--- FAIL: TestA (0.00s)\n",
			err:    exit1,
			status: statusFail,
			reason: "sub: a_test.go:5: boom",
		},
		{
			name: "testify wins over t.Log lines around it",
			out: strings.Join([]string{
				"    a_test.go:3: consumer became active",
				"    a_test.go:9: ",
				"        \tError Trace:\t/w/pulsar/a_test.go:9",
				"        \tError:      \tShould be true",
				"        \tTest:       \tTestA",
				"    a_test.go:4: consumer became inactive",
				"--- FAIL: TestA (1.00s)",
			}, "\n"),
			err:    exit1,
			status: statusFail,
			reason: "a_test.go:9: Should be true",
		},
		{
			name:   "last t.Log-style line before the verdict",
			out:    "    a_test.go:3: progress\n    a_test.go:8: want 3 got 2\n--- FAIL: TestA (0.10s)\n",
			err:    exit1,
			status: statusFail,
			reason: "a_test.go:8: want 3 got 2",
		},
		{
			name:   "no verdict",
			out:    "something else\n",
			err:    exit1,
			status: statusFail,
			reason: "no verdict in the output",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parseOutput("TestA", tc.out, tc.err, tc.killed)
			if got.status != tc.status {
				t.Fatalf("status = %q, want %q (reason %q)", got.status, tc.status, got.reason)
			}
			if tc.reason == "" && got.reason != "" {
				t.Errorf("reason = %q, want none", got.reason)
			}
			if !strings.Contains(got.reason, tc.reason) {
				t.Errorf("reason = %q, want it to contain %q", got.reason, tc.reason)
			}
			if !strings.Contains(got.hint, tc.hint) {
				t.Errorf("hint = %q, want it to contain %q", got.hint, tc.hint)
			}
		})
	}
}

func TestTrimBoundsLength(t *testing.T) {
	got := trim(strings.Repeat("ab  ", 200))
	if n := len([]rune(got)); n != maxReasonRune {
		t.Fatalf("len = %d, want %d", n, maxReasonRune)
	}
	if strings.Contains(got, "  ") {
		t.Fatalf("white space not collapsed: %q", got)
	}
}
