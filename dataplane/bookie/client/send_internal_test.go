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
	h := &WriteHandle{ensemble: []string{"b0", "b1", "b2"}, conns: []BookieConn{conn, conn, conn}, gen: make([]uint32, 3)}
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

// TestPendingAddRecycledAfterLastReply: an entry acknowledged by its ack
// quorum and delivered is not recycled while a bookie of its write quorum
// has yet to answer (the answer lands on a record inside the entry), and
// is recycled, emptied, once that answer came.
func TestPendingAddRecycledAfterLastReply(t *testing.T) {
	conn := &recordingConn{}
	h := &WriteHandle{
		id: 1, meta: &LedgerMetadata{ID: 1, Ensemble: 3, WriteQuorum: 3, AckQuorum: 2},
		ensemble: []string{"b0", "b1", "b2"}, conns: []BookieConn{conn, conn, conn},
		failed: make([]bool, 3), gen: make([]uint32, 3), lac: -1, drained: make(chan struct{}),
	}
	acked := make(chan int64, 1)
	h.AppendAsync([]byte("entry"), func(id int64, err error) {
		if err != nil {
			t.Errorf("entry %d: %v", id, err)
		}
		acked <- id
	})
	h.mu.Lock()
	p := h.pending[0]
	h.mu.Unlock()
	if len(conn.got) != 3 {
		t.Fatalf("%d sends, want 3", len(conn.got))
	}
	conn.got[0].AddDone(nil)
	conn.got[1].AddDone(nil) // the ack quorum
	if id := <-acked; id != 0 {
		t.Fatalf("acknowledged entry %d, want 0", id)
	}
	h.wg.Wait() // the delivery goroutine is done
	h.mu.Lock()
	holds, entry, third := p.holds, p.entryID, p.sends[2]
	h.mu.Unlock()
	if holds != 1 || entry != 0 || third.p != p || third.addr != "b2" {
		t.Fatalf("delivered entry before the last reply: holds %d, record %+v; want 1 hold and the record intact", holds, third)
	}
	conn.got[2].AddDone(nil) // the late bookie
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.holds != 0 || p.sends[2].p != nil || p.req.Payload != nil {
		t.Fatalf("after the last reply: holds %d, third record %+v, payload %q; want it emptied for reuse", p.holds, p.sends[2], p.req.Payload)
	}
}
