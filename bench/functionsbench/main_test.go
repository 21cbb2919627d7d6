package main

import (
	"os"
	"testing"
	"time"
)

func TestPayloadRoundTrip(t *testing.T) {
	at := time.Unix(1_800_000_000, 123456789)
	for _, size := range []int{40, 100, 1024} {
		b := payload(42, at, size)
		if len(b) != size {
			t.Errorf("payload(size %d) is %d bytes", size, len(b))
		}
		out := append(b, '!') // what the exclamation function returns
		seq, sched, ok := parsePayload(out)
		if !ok || seq != 42 || sched != at.UnixNano() {
			t.Errorf("parsePayload(%q) = %d, %d, %v", out, seq, sched, ok)
		}
	}
	for _, bad := range []string{"probe!", "", "12 x", "1 2"} {
		if _, _, ok := parsePayload([]byte(bad)); ok {
			t.Errorf("parsePayload(%q) ok", bad)
		}
	}
}

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses; utime 100, stime 50,
	// cutime 7, cstime 3.
	line := "4242 (java (x) y) S 17 4242 4242 0 -1 4194560 1 0 0 0 100 50 7 3 20 0 30 0 1 2 3"
	p, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if p.pid != 4242 || p.ppid != 17 || p.ticks != 160 {
		t.Errorf("parseStat = %+v", p)
	}
	if _, err := parseStat("4242 (x) S 1"); err == nil {
		t.Error("short stat accepted")
	}
}

func TestParseVmRSS(t *testing.T) {
	if got := parseVmRSS("Name:\tjava\nVmRSS:\t  204800 kB\nThreads: 30\n"); got != 204800 {
		t.Errorf("parseVmRSS = %d", got)
	}
	if got := parseVmRSS("Name:\tkthreadd\n"); got != 0 {
		t.Errorf("parseVmRSS of a kernel thread = %d", got)
	}
}

func TestReadTreeSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	tr, err := readTree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tr.root.pid != os.Getpid() || tr.root.rssKiB == 0 {
		t.Errorf("readTree(self).root = %+v", tr.root)
	}
}

func TestSpreadCell(t *testing.T) {
	for _, tc := range []struct {
		samples []sample
		want    string
	}{
		{nil, "—"},
		{[]sample{{"x": 2}}, "2.0"},
		{[]sample{{"x": 3}, {"x": 1}, {"y": 9}, {"x": 2}}, "2.0 [1.0–3.0]"},
		{[]sample{{"x": 4}, {"x": 1}}, "2.5 [1.0–4.0]"},
	} {
		if got := spreadCell(tc.samples, "x", "%.1f"); got != tc.want {
			t.Errorf("spreadCell(%v) = %q, want %q", tc.samples, got, tc.want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	o, md, err := parseArgs([]string{"-systems", "pulsar", "-rounds", "1", "-markdown", "/tmp/x.md", "-pulsar-heap", "-Xmx1g -XX:+UseZGC"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.systems) != 2 || o.systems[0] != "magnetar" || o.systems[1] != "pulsar" || o.rounds != 1 || md != "/tmp/x.md" {
		t.Errorf("parseArgs: %+v %q", o, md)
	}
	if len(o.pulsarHeap) != 2 || o.pulsarHeap[1] != "-XX:+UseZGC" {
		t.Errorf("pulsar heap %q", o.pulsarHeap)
	}
	if _, _, err := parseArgs([]string{"-systems", "kafka"}); err == nil {
		t.Error("unknown system accepted")
	}
}
