package ratelimit

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Resolution is the shortest interval between refills: elapsed time below
// it accrues and is added at a later call. Pulsar's PIP-322 bucket uses
// 16 ms too.
const Resolution = 16 * time.Millisecond

// Bucket is a token bucket whose balance may go negative. The zero value is
// not usable; see New.
type Bucket struct {
	tokens atomic.Int64
	last   atomic.Int64 // Unix ns up to which time has been converted to tokens
	rate   atomic.Pointer[rate]
}

// rate is tokens per period; the capacity is one period's tokens.
type rate struct {
	tokens int64 // per period, > 0
	period int64 // ns, > 0
}

// New returns a full bucket of tokensPerPeriod tokens, refilled at
// tokensPerPeriod every period, as of now (Unix ns). tokensPerPeriod and
// period must be positive.
func New(tokensPerPeriod int64, period time.Duration, now int64) *Bucket {
	b := &Bucket{}
	b.rate.Store(newRate(tokensPerPeriod, period))
	b.tokens.Store(tokensPerPeriod)
	b.last.Store(now)
	return b
}

func newRate(tokensPerPeriod int64, period time.Duration) *rate {
	if tokensPerPeriod <= 0 || period <= 0 {
		panic("ratelimit: tokens per period and period must be positive")
	}
	return &rate{tokens: tokensPerPeriod, period: int64(period)}
}

// SetRate changes the rate and capacity in place, keeping the balance
// (clamped to the new capacity). Time elapsed before now accrues at the old
// rate.
func (b *Bucket) SetRate(tokensPerPeriod int64, period time.Duration, now int64) {
	r := newRate(tokensPerPeriod, period)
	old := b.rate.Load()
	if *old == *r {
		return
	}
	b.refill(now, true)
	b.rate.Store(r)
	for {
		t := b.tokens.Load()
		if t <= r.tokens || b.tokens.CompareAndSwap(t, r.tokens) {
			return
		}
	}
}

// Rate returns the tokens per period and the period.
func (b *Bucket) Rate() (int64, time.Duration) {
	r := b.rate.Load()
	return r.tokens, time.Duration(r.period)
}

// Consume takes n tokens as of now and returns the balance left, which is
// negative when the caller went over the rate.
func (b *Bucket) Consume(n, now int64) int64 {
	b.refill(now, false)
	return b.tokens.Add(-n)
}

// Tokens returns the balance as of now.
func (b *Bucket) Tokens(now int64) int64 {
	b.refill(now, false)
	return b.tokens.Load()
}

// Wait returns how long after now the balance reaches atLeast (0: it has
// already), assuming nothing else is consumed meanwhile. It is never shorter
// than Resolution when waiting is needed, so a caller that waits and checks
// again sees the refill.
func (b *Bucket) Wait(atLeast, now int64) time.Duration {
	b.refill(now, false)
	deficit := atLeast - b.tokens.Load()
	if deficit <= 0 {
		return 0
	}
	r := b.rate.Load()
	// The time deficit tokens take to accrue, rounded up, counted from the
	// last refill (time since then has accrued but not been added).
	need, ok := mulDiv(deficit, r.period, r.tokens, true)
	if !ok {
		return time.Duration(math.MaxInt64)
	}
	need = max(need, int64(Resolution))
	at := b.last.Load() + need
	if at <= now {
		return Resolution
	}
	return time.Duration(at - now)
}

// refill converts the time elapsed since the last refill into tokens, at
// most every Resolution unless force.
func (b *Bucket) refill(now int64, force bool) {
	last := b.last.Load()
	elapsed := now - last
	if elapsed <= 0 || (!force && elapsed < int64(Resolution)) {
		return
	}
	r := b.rate.Load()
	add, ok := mulDiv(elapsed, r.tokens, r.period, false)
	next := now
	if ok {
		if add == 0 {
			return // not a whole token yet: keep accruing
		}
		// Advance only by the time the whole tokens account for, so the
		// fraction is not lost.
		used, _ := mulDiv(add, r.period, r.tokens, false)
		next = last + used
	} else {
		// Idle for so long that the tokens do not fit an int64: full.
		add = math.MaxInt64
	}
	if !b.last.CompareAndSwap(last, next) {
		return // another caller refilled this interval
	}
	for {
		t := b.tokens.Load()
		nt := t + add
		if nt > r.tokens || nt < t { // full, or overflow
			nt = max(t, r.tokens)
		}
		if b.tokens.CompareAndSwap(t, nt) {
			return
		}
	}
}

// mulDiv returns a*b/c for non-negative a, b and positive c, rounded down
// (or up), and false when the result does not fit an int64.
func mulDiv(a, b, c int64, up bool) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, false
	}
	q, rem := bits.Div64(hi, lo, uint64(c))
	if up && rem != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}
