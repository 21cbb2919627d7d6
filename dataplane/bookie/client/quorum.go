package client

// Quorum arithmetic. Pure functions of (E, Qw, Qa) and entry ids, so the
// rules can be tested exhaustively without bookies.

// writeSet appends to dst the ensemble indexes that store entryID: the Qw
// consecutive indexes starting at entryID mod E.
func writeSet(dst []int, entryID int64, e, qw int) []int {
	start := int(entryID % int64(e))
	for i := 0; i < qw; i++ {
		dst = append(dst, (start+i)%e)
	}
	return dst
}

// inWriteSet reports whether ensemble index idx stores entryID.
func inWriteSet(idx int, entryID int64, e, qw int) bool {
	start := int(entryID % int64(e))
	d := idx - start
	if d < 0 {
		d += e
	}
	return d < qw
}

// coverage tracks replies from an ensemble for operations that must reach
// enough bookies that no writer can still complete a quorum without them:
// fencing and reading the LAC. The rule (BookKeeper's): the operation is
// covered when, in every write set, at least Qw-Qa+1 bookies answered
// positively; then no write set has Qa bookies left that did not see it.
// It fails when some write set has so many negative answers that this can
// no longer happen.
type coverage struct {
	e, qw, qa int
	ok        []bool
	failed    []bool
}

func newCoverage(e, qw, qa int) *coverage {
	return &coverage{e: e, qw: qw, qa: qa, ok: make([]bool, e), failed: make([]bool, e)}
}

func (c *coverage) success(idx int) { c.ok[idx] = true }
func (c *coverage) failure(idx int) { c.failed[idx] = true }

// covered reports whether every write set has Qw-Qa+1 positive replies.
func (c *coverage) covered() bool {
	need := c.qw - c.qa + 1
	for s := 0; s < c.e; s++ {
		n := 0
		for i := 0; i < c.qw; i++ {
			if c.ok[(s+i)%c.e] {
				n++
			}
		}
		if n < need {
			return false
		}
	}
	return true
}

// impossible reports whether some write set has more than Qa-1 failures, so
// coverage can no longer be reached.
func (c *coverage) impossible() bool {
	need := c.qw - c.qa + 1
	for s := 0; s < c.e; s++ {
		n := 0
		for i := 0; i < c.qw; i++ {
			if !c.failed[(s+i)%c.e] {
				n++
			}
		}
		if n < need {
			return true
		}
	}
	return false
}

// entryOutcome classifies one entry during recovery from the replies of its
// write set (BookKeeper's rules): recoverable once any bookie returns it with
// a valid checksum; unrecoverable (it can never have been acknowledged) once
// Qw-Qa+1 bookies explicitly say they do not have it; undecided otherwise.
type entryOutcome int

const (
	outcomeUndecided entryOutcome = iota
	outcomeRecoverable
	outcomeUnrecoverable
)

func classifyEntry(found, missing, qw, qa int) entryOutcome {
	switch {
	case found > 0:
		return outcomeRecoverable
	case missing >= qw-qa+1:
		return outcomeUnrecoverable
	}
	return outcomeUndecided
}
