package ledger

import (
	"math/bits"
	"slices"
	"sort"
)

// ackSet holds the individually acknowledged entries above a cursor's
// mark-delete position as sorted, disjoint runs per ledger. Adjacent runs of
// the same ledger are merged; runs of different ledgers never are (whether
// two ledgers are adjacent depends on the ledger list, which the cursor
// consults when it advances its mark-delete position). It is a pure data
// structure, not safe for concurrent use.
type ackSet struct {
	r     []ackRange
	count int64 // entries in all runs
}

func rangeStart(r ackRange) Position { return Position{r.LedgerID, r.From} }

// search returns the index of the first run starting after p.
func (s *ackSet) search(p Position) int {
	return sort.Search(len(s.r), func(i int) bool { return rangeStart(s.r[i]).Compare(p) > 0 })
}

func (s *ackSet) contains(p Position) bool {
	i := s.search(p)
	if i == 0 {
		return false
	}
	r := s.r[i-1]
	return r.LedgerID == p.LedgerID && p.EntryID <= r.To
}

// runAt returns the run holding p.
func (s *ackSet) runAt(p Position) (ackRange, bool) {
	i := s.search(p)
	if i == 0 {
		return ackRange{}, false
	}
	r := s.r[i-1]
	if r.LedgerID == p.LedgerID && p.EntryID <= r.To {
		return r, true
	}
	return ackRange{}, false
}

// add inserts p; it reports false if p was already present.
func (s *ackSet) add(p Position) bool {
	i := s.search(p)
	if i > 0 {
		prev := &s.r[i-1]
		if prev.LedgerID == p.LedgerID && p.EntryID <= prev.To {
			return false
		}
		if prev.LedgerID == p.LedgerID && prev.To == p.EntryID-1 {
			prev.To = p.EntryID
			s.count++
			if i < len(s.r) && s.r[i].LedgerID == p.LedgerID && s.r[i].From == p.EntryID+1 {
				prev.To = s.r[i].To
				s.r = slices.Delete(s.r, i, i+1)
			}
			return true
		}
	}
	s.count++
	if i < len(s.r) && s.r[i].LedgerID == p.LedgerID && s.r[i].From == p.EntryID+1 {
		s.r[i].From = p.EntryID
		return true
	}
	s.r = slices.Insert(s.r, i, ackRange{LedgerID: p.LedgerID, From: p.EntryID, To: p.EntryID})
	return true
}

// removeThrough drops every acknowledged entry at or before p.
func (s *ackSet) removeThrough(p Position) {
	n := 0
	for n < len(s.r) {
		r := &s.r[n]
		if (Position{r.LedgerID, r.To}).Compare(p) <= 0 {
			s.count -= r.To - r.From + 1
			n++
			continue
		}
		if r.LedgerID == p.LedgerID && r.From <= p.EntryID {
			s.count -= p.EntryID - r.From + 1
			r.From = p.EntryID + 1
		}
		break
	}
	s.r = slices.Delete(s.r, 0, n)
}

// countThrough counts the acknowledged entries at or before p.
func (s *ackSet) countThrough(p Position) int64 {
	var n int64
	for _, r := range s.r {
		if (Position{r.LedgerID, r.To}).Compare(p) <= 0 {
			n += r.To - r.From + 1
			continue
		}
		if r.LedgerID == p.LedgerID && r.From <= p.EntryID {
			n += p.EntryID - r.From + 1
		}
		break
	}
	return n
}

func (s *ackSet) clear() { s.r, s.count = nil, 0 }

// bitset helpers for batch-index acknowledgements.

func bitsetWords(n int) int { return (n + 63) / 64 }

func bitsetFull(b []uint64, n int) bool {
	c := 0
	for _, w := range b {
		c += bits.OnesCount64(w)
	}
	return c >= n
}
