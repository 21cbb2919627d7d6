package latency

import (
	"math/bits"
	"time"
)

// Histogram is a log-bucketed latency histogram at microsecond resolution,
// in the spirit of HdrHistogram: values below 2^histExact µs are counted
// exactly; above, each power of two is split into histSub equal buckets, so
// a reported percentile is at most 1/histSub (1.6%) above the true value. It
// is not safe for concurrent use.
type Histogram struct {
	counts []uint64
	n      uint64
	sum    uint64
	max    uint64
}

const (
	histExact   = 7                // values < 128 µs have their own bucket
	histSubBits = histExact - 1    // 64 buckets per power of two above that
	histSub     = 1 << histSubBits // sub-buckets per power of two
	histBuckets = 1<<histExact + (64-histExact)*histSub
)

func NewHistogram() *Histogram { return &Histogram{counts: make([]uint64, histBuckets)} }

// bucketOf returns the bucket index of v (µs).
func bucketOf(v uint64) int {
	if v < 1<<histExact {
		return int(v)
	}
	msb := bits.Len64(v) - 1 // >= histExact
	shift := msb - histSubBits
	sub := v>>shift - histSub // in [0, histSub)
	return 1<<histExact + (msb-histExact)*histSub + int(sub)
}

// bucketHigh returns the highest value (µs) counted in bucket i.
func bucketHigh(i int) uint64 {
	if i < 1<<histExact {
		return uint64(i)
	}
	i -= 1 << histExact
	msb := i/histSub + histExact
	shift := msb - histSubBits
	low := uint64(histSub+i%histSub) << shift
	return low + 1<<shift - 1
}

// Record counts one latency.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0) / time.Microsecond)
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += v
	h.max = max(h.max, v)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Quantile returns the latency at quantile q in [0, 1]: the highest value
// of the bucket holding the ceil(q*n)-th smallest sample (never above max).
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max)) * time.Microsecond
		}
	}
	return time.Duration(h.max) * time.Microsecond
}

// Mean returns the average latency.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum/h.n) * time.Microsecond
}

// Count returns how many latencies were recorded.
func (h *Histogram) Count() uint64 { return h.n }
