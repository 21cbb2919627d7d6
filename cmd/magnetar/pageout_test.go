package main

import (
	"testing"

	"github.com/magnetar-dev/magnetar/internal/procstatus"
)

func TestExeMappings(t *testing.T) {
	maps := []byte(`00400000-00402000 r--p 00000000 00:2e 123 /opt/magnetar/bin/magnetar
00402000-01d26000 r-xp 00002000 00:2e 123 /opt/magnetar/bin/magnetar
03d4b000-03f1b000 rw-p 0394a000 00:2e 123 /opt/magnetar/bin/magnetar
03f1b000-03f50000 rw-p 00000000 00:00 0
7f00000000-7f00001000 r-xp 00000000 00:2e 9 /usr/lib/libc.so.6
7f10000000-7f10002000 r--p 00000000 00:2e 77 /tmp/a dir/magnetar
zz-7f10000000 r--p 00000000 00:2e 77 /opt/magnetar/bin/magnetar
`)
	got := exeMappings(maps, "/opt/magnetar/bin/magnetar")
	want := []mapping{{0x400000, 0x402000}, {0x402000, 0x1d26000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("exeMappings = %x, want %x (read-only mappings of the executable only)", got, want)
	}
	if got := exeMappings(maps, "/tmp/a dir/magnetar"); len(got) != 1 || got[0] != (mapping{0x7f10000000, 0x7f10002000}) {
		t.Fatalf("path with a space: %x", got)
	}
}

// TestPageOutExecutable: the test binary's own executable pages leave its
// resident set, though it was written a moment ago, and the program goes on
// running (pages fault back in).
func TestPageOutExecutable(t *testing.T) {
	before := rssFileKiB(t)
	n := pageOutExecutable()
	after := rssFileKiB(t)
	if n <= 0 {
		t.Fatalf("released %d bytes of mappings", n)
	}
	if after >= before {
		t.Fatalf("RssFile %d KiB before, %d KiB after releasing the executable's pages", before, after)
	}
	t.Logf("RssFile %d -> %d KiB (%d MiB of mappings advised)", before, after, n>>20)
}

func rssFileKiB(t *testing.T) int64 {
	t.Helper()
	n, err := procstatus.Field(procstatus.Self, "RssFile")
	if err != nil {
		t.Skip(err)
	}
	return n >> 10
}
