package latency

import (
	"testing"
	"time"
)

func TestBucketBounds(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 1000, 4095, 4096, 1 << 20, 1<<40 + 12345, 1<<63 + 5} {
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d out of range", v, i)
		}
		hi := bucketHigh(i)
		if hi < v {
			t.Fatalf("bucketHigh(bucketOf(%d)) = %d, below the value", v, hi)
		}
		if v >= 128 && float64(hi-v) > float64(v)/histSub {
			t.Fatalf("value %d reported as %d: error above 1/%d", v, hi, histSub)
		}
		if i > 0 && bucketHigh(i-1) >= v {
			t.Fatalf("value %d also fits bucket %d (high %d)", v, i-1, bucketHigh(i-1))
		}
	}
}

func TestQuantiles(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"single", []time.Duration{42 * time.Microsecond}, 0.99, 42 * time.Microsecond},
		{"median of five", []time.Duration{1, 2, 3, 4, 5}, 0.5, 0}, // sub-µs values are 0 µs
		{"median exact", []time.Duration{10 * time.Microsecond, 20 * time.Microsecond, 30 * time.Microsecond}, 0.5, 20 * time.Microsecond},
		{"p100 is max", []time.Duration{10 * time.Microsecond, 5 * time.Millisecond}, 1, 5 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistogram()
			for _, s := range tc.samples {
				h.Record(s)
			}
			if got := h.Quantile(tc.q); got != tc.want {
				t.Fatalf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestQuantileUniform(t *testing.T) {
	h := NewHistogram()
	for i := 1; i <= 100000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		want := time.Duration(q*100000) * time.Microsecond
		got := h.Quantile(q)
		if got < want || float64(got-want) > float64(want)/histSub {
			t.Errorf("quantile(%v) = %v, want %v within 1/%d", q, got, want, histSub)
		}
	}
	o := NewHistogram()
	o.Record(time.Second)
	h.Merge(o)
	if h.n != 100001 || h.Quantile(1) != time.Second {
		t.Fatalf("merge: n=%d max=%v", h.n, h.Quantile(1))
	}
}
