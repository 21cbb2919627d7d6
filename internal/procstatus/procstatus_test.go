package procstatus

import (
	"os"
	"testing"
)

func TestBytes(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc:", err)
	}
	v, err := Bytes(Self, "VmRSS", "RssAnon", "RssFile")
	if err != nil {
		t.Fatal(err)
	}
	if v[0] <= 0 || v[1] <= 0 || v[2] <= 0 || v[1]+v[2] > v[0]+64<<10 {
		t.Fatalf("VmRSS %d, RssAnon %d, RssFile %d", v[0], v[1], v[2])
	}
	byPid, err := Field(os.Getpid(), "VmRSS")
	if err != nil || byPid <= 0 {
		t.Fatalf("Field(own pid, VmRSS) = %d, %v", byPid, err)
	}
	if _, err := Field(Self, "NoSuchField"); err == nil {
		t.Fatal("a missing field is not an error")
	}
}
