package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Test outcomes.
const (
	statusPass    = "pass"
	statusFail    = "fail"
	statusSkip    = "skip"
	statusNotRun  = "not run"
	maxReasonRune = 240
)

var (
	// "--- FAIL: TestX (1.23s)" at column 0: the top-level verdict.
	verdictRE = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) \(`)
	// "=== RUN   TestX/sub" and "=== CONT  TestX/sub".
	runRE = regexp.MustCompile(`^=== (?:RUN|CONT|PAUSE|NAME)\s+(\S+)`)
	// a subtest's verdict, indented.
	subVerdictRE = regexp.MustCompile(`^\s+--- (?:PASS|FAIL|SKIP): (\S+) \(`)
	// "    foo_test.go:123: message" from t.Error/t.Fatal/testify.
	testLineRE = regexp.MustCompile(`^\s+(\w[\w.-]*_test\.go:\d+): ?(.*)$`)
	// testify's labelled lines: "\tError:      \tNot equal:".
	labelRE = regexp.MustCompile(`^\s+(Error Trace|Error|Test|Messages):\s*(.*)$`)
	// continuation of a testify label: tab-indented text without a label.
	contRE = regexp.MustCompile(`^\s+\t\s*(\S.*)$`)
	// "goroutine 21 [sleep]:" and "goroutine 7 [chan receive, 1 minutes]:".
	goroutineRE = regexp.MustCompile(`^goroutine \d+ \[([^\],]+)`)
	// "\t/path/to/file.go:123 +0x45".
	frameRE = regexp.MustCompile(`^\t(\S+\.go):(\d+)`)
	// a logrus or slog line of the client at warning level or worse.
	clientErrRE = regexp.MustCompile(`level=(warning|error|fatal)|"level":"(WARN|ERROR)"`)
	spaceRE     = regexp.MustCompile(`\s+`)
)

// outcome is what one test run's output says.
type outcome struct {
	status string
	reason string // empty on pass
	hint   string // the client's last warning/error line, for failures
}

// parseOutput reads the -test.v output of one test run. exitErr reports
// how the process ended (nil: exit 0); timedOut is set when the runner had
// to kill it.
func parseOutput(name, out string, exitErr error, killed bool) outcome {
	lines := strings.Split(out, "\n")
	status := ""
	for _, l := range lines {
		if m := verdictRE.FindStringSubmatch(l); m != nil && m[2] == name {
			status = strings.ToLower(m[1])
		}
	}
	o := outcome{status: status}
	switch {
	case status == statusPass && exitErr == nil:
		return o
	case status == statusSkip:
		o.reason = skipReason(lines)
		return o
	}
	o.status = statusFail
	o.hint = lastClientError(lines)
	switch {
	case killed:
		o.reason = "killed by the runner: the test binary outlived its timeout"
	case strings.Contains(out, "panic: test timed out after"):
		o.reason = timeoutReason(name, lines)
	default:
		o.reason = failReason(lines)
		if o.reason == "" && (strings.Contains(out, "\npanic: ") || strings.HasPrefix(out, "panic: ")) {
			o.reason = panicReason(lines)
		}
		if o.reason == "" && strings.Contains(out, "WARNING: DATA RACE") {
			o.reason = "data race: " + firstUpstreamFrame(lines, indexOf(lines, "WARNING: DATA RACE"))
		}
		if o.reason == "" && status == "" {
			o.reason = fmt.Sprintf("no verdict in the output (exit: %v)", exitErr)
		}
		if o.reason == "" {
			o.reason = "failed without an assertion message"
		}
	}
	o.reason = trim(o.reason)
	o.hint = trim(o.hint)
	return o
}

// failReason is the first failing testify assertion (file:line, its
// Error text, continuation lines and Messages). Without one it is the last
// "x_test.go:N: text" line before the verdict: t.Log and t.Error print
// alike, and a t.Fatal ends the test, so the last such line is the likelier
// failure.
func failReason(lines []string) string {
	running := "" // the (sub)test last started
	last := ""
	for i, l := range lines {
		if verdictRE.MatchString(l) {
			break
		}
		if m := runRE.FindStringSubmatch(l); m != nil {
			running = m[1]
		}
		if m := subVerdictRE.FindStringSubmatch(l); m != nil && m[1] == running {
			if k := strings.LastIndex(running, "/"); k > 0 {
				running = running[:k]
			}
		}
		m := testLineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		where, msg := m[1], strings.TrimSpace(m[2])
		if k := strings.Index(running, "/"); k > 0 {
			where = running[k+1:] + ": " + where
		}
		if msg == "" || strings.HasPrefix(msg, "Error Trace:") {
			if r := testifyBlock(lines[i+1:]); r != "" {
				return where + ": " + r
			}
			continue
		}
		// t.Errorf style; the message may continue on indented lines.
		parts := []string{msg}
		for _, c := range lines[i+1:] {
			if !strings.HasPrefix(c, "        ") || labelRE.MatchString(c) || testLineRE.MatchString(c) {
				break
			}
			parts = append(parts, strings.TrimSpace(c))
		}
		last = where + ": " + strings.Join(parts, " ")
	}
	return last
}

// testifyBlock collects Error and Messages of one testify failure.
func testifyBlock(lines []string) string {
	var parts []string
	label := ""
	for _, l := range lines {
		if m := labelRE.FindStringSubmatch(l); m != nil {
			label = m[1]
			if label == "Test" {
				break
			}
			if (label == "Error" || label == "Messages") && m[2] != "" {
				if label == "Messages" {
					parts = append(parts, "Messages:")
				}
				parts = append(parts, strings.TrimSpace(m[2]))
			}
			continue
		}
		if m := contRE.FindStringSubmatch(l); m != nil && label != "" {
			if label == "Error" || label == "Messages" {
				parts = append(parts, strings.TrimSpace(m[1]))
			}
			continue
		}
		break
	}
	return strings.Join(parts, " ")
}

// timeoutReason names where the test goroutine was blocked when
// -test.timeout fired.
func timeoutReason(name string, lines []string) string {
	head := "timed out"
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: test timed out after ") {
			head = "timed out after " + strings.TrimPrefix(l, "panic: test timed out after ")
			break
		}
	}
	// Find the goroutine whose stack runs the test function and report the
	// test-file frame and the goroutine's state.
	state := ""
	for i, l := range lines {
		if m := goroutineRE.FindStringSubmatch(l); m != nil {
			state = m[1]
			continue
		}
		if strings.Contains(l, "."+name+"(") && i+1 < len(lines) {
			if f := frameRE.FindStringSubmatch(lines[i+1]); f != nil {
				// the frame just above the test function in the same
				// goroutine says what it waits in
				return fmt.Sprintf("%s: test blocked [%s] at %s:%s%s", head, state,
					filepath.Base(f[1]), f[2], calleeAbove(lines, i))
			}
		}
	}
	return head
}

// calleeAbove returns " in <func>" for the call the test function at
// lines[i] was making, from the frame printed just above it.
func calleeAbove(lines []string, i int) string {
	if i < 2 || !frameRE.MatchString(lines[i-1]) || strings.HasPrefix(lines[i-2], "goroutine ") {
		return ""
	}
	fn := lines[i-2]
	if k := strings.LastIndex(fn, "("); k > 0 {
		fn = fn[:k]
	}
	if k := strings.LastIndex(fn, "/"); k >= 0 {
		fn = fn[k+1:]
	}
	return " in " + fn
}

// panicReason is the panic message and the first upstream frame.
func panicReason(lines []string) string {
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			msg := strings.TrimPrefix(l, "panic: ")
			if where := firstUpstreamFrame(lines, i); where != "" {
				return "panic: " + msg + " at " + where
			}
			return "panic: " + msg
		}
	}
	return "panic"
}

// firstUpstreamFrame returns file:line of the first stack frame after line
// from that is not in the Go runtime, testing or the standard library.
func firstUpstreamFrame(lines []string, from int) string {
	if from < 0 {
		return ""
	}
	for _, l := range lines[from:] {
		f := frameRE.FindStringSubmatch(l)
		if f == nil {
			continue
		}
		if strings.Contains(f[1], "/go/src/") || strings.Contains(f[1], "/libexec/src/") {
			continue
		}
		return shortPath(f[1]) + ":" + f[2]
	}
	return ""
}

// shortPath keeps the last two path elements.
func shortPath(p string) string {
	dir, file := filepath.Split(p)
	return filepath.Join(filepath.Base(dir), file)
}

func skipReason(lines []string) string {
	for _, l := range lines {
		if m := testLineRE.FindStringSubmatch(l); m != nil && m[2] != "" {
			return trim(m[1] + ": " + m[2])
		}
	}
	return ""
}

// lastClientError is the client's last log line at warning level or worse
// before the verdict: what it saw from the broker.
func lastClientError(lines []string) string {
	last := ""
	for _, l := range lines {
		if strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "panic: ") {
			break
		}
		if clientErrRE.MatchString(l) {
			last = l
		}
	}
	if last == "" {
		return ""
	}
	return summarizeLogLine(last)
}

var (
	// logrus: msg="..." error="..."; slog JSON: "msg":"...","error":"...".
	logrusFieldRE = regexp.MustCompile(`\b(msg|error|err)=("(?:[^"\\]|\\.)*"|\S+)`)
	jsonFieldRE   = regexp.MustCompile(`"(msg|error|err)":("(?:[^"\\]|\\.)*")`)
)

// summarizeLogLine keeps the message and error of a client log line.
func summarizeLogLine(l string) string {
	re := logrusFieldRE
	if strings.HasPrefix(l, "{") {
		re = jsonFieldRE
	}
	var parts []string
	for _, m := range re.FindAllStringSubmatch(l, -1) {
		v := m[2]
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		if m[1] == "msg" {
			parts = append(parts, v)
		} else {
			parts = append(parts, m[1]+": "+v)
		}
	}
	if len(parts) == 0 {
		return l
	}
	return strings.Join(parts, "; ")
}

func indexOf(lines []string, s string) int {
	for i, l := range lines {
		if strings.Contains(l, s) {
			return i
		}
	}
	return -1
}

// trim collapses white space and bounds the length for a table cell.
func trim(s string) string {
	s = strings.TrimSpace(spaceRE.ReplaceAllString(s, " "))
	if r := []rune(s); len(r) > maxReasonRune {
		s = string(r[:maxReasonRune-1]) + "…"
	}
	return s
}
