package client

import (
	"testing"

	"github.com/magnetar-dev/magnetar/dataplane/bookie/wire"
)

// recordingConn is a BookieConn that only keeps what Add was given.
type recordingConn struct {
	BookieConn // other methods unused
	got        []wire.AddDone
}

func (c *recordingConn) Add(_ *wire.AddRequest, done wire.AddDone) { c.got = append(c.got, done) }

// TestSendUsesEntryRecords: sending an entry to its first bookies
// allocates nothing for the reply callback (the pending entry holds the
// records); a send beyond them, as after an ensemble change, gets a record
// of its own, and no record is handed out twice.
func TestSendUsesEntryRecords(t *testing.T) {
	conn := &recordingConn{got: make([]wire.AddDone, 0, 1024)}
	h := &WriteHandle{ensemble: []string{"b0", "b1", "b2"}, conns: []BookieConn{conn, conn, conn}}
	p := &pendingAdd{entryID: 7}
	allocs := testing.AllocsPerRun(100, func() {
		p.nsends = 0
		conn.got = conn.got[:0]
		for idx := range 3 {
			h.sendLocked(p, idx)
		}
	})
	if allocs != 0 {
		t.Fatalf("sending an entry to 3 bookies allocated %.1f times, want 0", allocs)
	}
	h.sendLocked(p, 1) // a fourth send: the entry's records are used up
	seen := map[wire.AddDone]bool{}
	for i, d := range conn.got {
		s, ok := d.(*addSend)
		if !ok || seen[d] {
			t.Fatalf("send %d: record %v reused or not an addSend", i, d)
		}
		seen[d] = true
		if want := []int{0, 1, 2, 1}[i]; s.idx != want || s.addr != h.ensemble[want] || s.entryID != 7 {
			t.Fatalf("send %d: record %+v, want bookie %d", i, *s, want)
		}
	}
	if len(conn.got) != 4 || conn.got[3] == wire.AddDone(&p.sends[0]) {
		t.Fatalf("the re-send used %v", conn.got[3:])
	}
}
