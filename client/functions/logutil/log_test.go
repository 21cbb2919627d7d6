package logutil

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/magnetar-dev/magnetar/client/functions/internal/logsink"
)

func TestLines(t *testing.T) {
	var buf bytes.Buffer
	var sunk []string
	oldOut, oldMin, oldExit := out, min, exit
	out, min = &buf, levelInfo
	exited := -1
	exit = func(code int) { exited = code }
	logsink.Set(func(line []byte) { sunk = append(sunk, string(line)) })
	t.Cleanup(func() {
		out, min, exit = oldOut, oldMin, oldExit
		logsink.Set(nil)
	})

	Debugf("hidden %d", 1)
	Info("a", 1, "b")
	Infof("len %d\n", 5)
	Warn("careful")
	Errorf("bad %s", "thing")
	Fatal("the end")

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []string{"[info] a1b", "[info] len 5", "[warning] careful", "[error] bad thing", "[fatal] the end"}
	if len(lines) != len(want) {
		t.Fatalf("lines %q, want %d", lines, len(want))
	}
	stamp := regexp.MustCompile(`^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3} `)
	for i, l := range lines {
		if !stamp.MatchString(l) || !strings.HasSuffix(l, want[i]) {
			t.Errorf("line %q, want a timestamp and %q", l, want[i])
		}
		if sunk[i] != l {
			t.Errorf("sink got %q, stderr %q", sunk[i], l)
		}
	}
	if exited != 1 {
		t.Errorf("Fatal exited with %d, want 1", exited)
	}
}

func TestParseLevel(t *testing.T) {
	for s, want := range map[string]level{
		"": levelInfo, "DEBUG": levelDebug, "trace": levelTrace, "warn": levelWarn,
		"warning": levelWarn, "error": levelError, "fatal": levelFatal, "nonsense": levelInfo,
	} {
		if got := parseLevel(s); got != want {
			t.Errorf("parseLevel(%q) = %d, want %d", s, got, want)
		}
	}
}
