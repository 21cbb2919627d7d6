package ratelimit

import (
	"sync"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// step is one operation on a bucket at a fake time (ms since the start).
type step struct {
	at      int64 // ms
	consume int64 // tokens taken (0: only read the balance)
	want    int64 // balance afterwards
}

func TestBucketTable(t *testing.T) {
	tests := []struct {
		name   string
		tokens int64
		period time.Duration
		steps  []step
	}{
		{"starts full", 10, time.Second, []step{{0, 0, 10}}},
		{"consume below zero", 10, time.Second, []step{{0, 25, -15}}},
		{"refill is proportional", 100, time.Second, []step{{0, 100, 0}, {500, 0, 50}, {1000, 0, 100}}},
		{"never above capacity", 100, time.Second, []step{{0, 10, 90}, {5000, 0, 100}}},
		{"debt is paid back at the rate", 10, time.Second, []step{{0, 40, -30}, {1000, 0, -20}, {3000, 0, 0}, {4000, 0, 10}}},
		{"no refill within the resolution", 1000, time.Second, []step{{0, 1000, 0}, {10, 0, 0}, {16, 0, 16}}},
		{"fractions are not lost", 10, time.Second, []step{
			// 10/s: a token per 100 ms; refills at 20, 40, ... ms add
			// nothing until a whole token accrued, then exactly one.
			{0, 10, 0}, {20, 0, 0}, {40, 0, 0}, {99, 0, 0}, {100, 0, 1}, {150, 0, 1}, {210, 0, 2}, {1000, 0, 10},
		}},
		{"period longer than a second", 60, time.Minute, []step{{0, 60, 0}, {1000, 0, 1}, {30000, 0, 30}}},
		{"long idle refills to capacity", 5, time.Second, []step{{0, 1000, -995}, {1 << 40, 0, 5}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.tokens, tc.period, 0)
			for i, s := range tc.steps {
				var got int64
				if s.consume != 0 {
					got = b.Consume(s.consume, s.at*ms)
				} else {
					got = b.Tokens(s.at * ms)
				}
				if got != s.want {
					t.Fatalf("step %d (at %d ms, consume %d): balance %d, want %d", i, s.at, s.consume, got, s.want)
				}
			}
		})
	}
}

func TestBucketWait(t *testing.T) {
	tests := []struct {
		name    string
		tokens  int64
		consume int64
		atLeast int64
		now     int64 // ms, when Wait is asked
		want    time.Duration
	}{
		{"not throttled", 10, 5, 0, 0, 0},
		{"exactly at zero", 10, 10, 0, 0, 0},
		{"debt of one token", 10, 11, 0, 0, 100 * time.Millisecond},
		{"debt of a period", 10, 20, 0, 0, time.Second},
		{"time since consume counts", 10, 20, 0, 400, 600 * time.Millisecond},
		{"at least the resolution", 1000, 1001, 0, 0, Resolution},
		{"a positive balance", 10, 10, 1, 0, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.tokens, time.Second, 0)
			b.Consume(tc.consume, 0)
			if got := b.Wait(tc.atLeast, tc.now*ms); got != tc.want {
				t.Fatalf("Wait = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBucketWaitThenConsume: a caller that consumes, waits as told and
// consumes again is held to the rate over a long run (no drift).
func TestBucketWaitThenConsume(t *testing.T) {
	for _, tc := range []struct {
		rate, each int64
	}{{100, 1}, {100, 7}, {1000, 333}, {3, 1}, {1 << 20, 5000}} {
		b := New(tc.rate, time.Second, 0)
		now := int64(0)
		var total int64
		for now < int64(100*time.Second) {
			b.Consume(tc.each, now)
			total += tc.each
			now += int64(b.Wait(0, now))
		}
		// Over 100 s: 100 s of rate plus the initial burst, give or take
		// one consume.
		want := 100*tc.rate + tc.rate
		if total < want-tc.each-1 || total > want+tc.each+1 {
			t.Errorf("rate %d, %d each: %d tokens in 100 s, want %d", tc.rate, tc.each, total, want)
		}
	}
}

func TestBucketSetRate(t *testing.T) {
	b := New(100, time.Second, 0)
	b.Consume(100, 0)
	b.SetRate(10, time.Second, 500*ms) // 50 accrued at the old rate, clamped to 10
	if got := b.Tokens(500 * ms); got != 10 {
		t.Fatalf("after lowering the rate: %d, want 10", got)
	}
	b.Consume(10, 500*ms)
	if got := b.Tokens(1500 * ms); got != 10 {
		t.Fatalf("a second at the new rate: %d, want 10", got)
	}
	b.SetRate(1000, time.Second, 1500*ms)
	if got := b.Tokens(2000 * ms); got != 510 {
		t.Fatalf("half a second at the raised rate: %d, want 510", got)
	}
	if n, p := b.Rate(); n != 1000 || p != time.Second {
		t.Fatalf("Rate = %d/%v", n, p)
	}
}

// TestBucketConcurrent: concurrent consumers and refills account for every
// token once (run with -race).
func TestBucketConcurrent(t *testing.T) {
	b := New(1000, time.Second, 0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); i < 1000; i++ {
				b.Consume(1, i*ms) // time runs to 1 s: 1000 tokens accrue
			}
		}()
	}
	wg.Wait()
	// 1000 at the start + 999 accrued - 8000 consumed, within a refill.
	got := b.Tokens(999 * ms)
	if want := int64(1000 + 999 - 8000); got < want-20 || got > want+20 {
		t.Fatalf("balance %d, want about %d", got, want)
	}
}

// BenchmarkBucketConsume is the cost of charging a bucket, from one
// goroutine and from all of them (the shared bucket of a resource group).
func BenchmarkBucketConsume(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		bk := New(1<<40, time.Second, 0)
		for i := range b.N {
			bk.Consume(1, int64(i)*1000)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		bk := New(1<<40, time.Second, 0)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bk.Consume(1, int64(time.Since(start)))
			}
		})
	})
}
