// Package latency owns the benchmarks' latency histogram: log-linear
// buckets at microsecond resolution (HdrHistogram's idea, our own code), so
// percentiles up to p99.9 and beyond are reported within 1.6% of the true
// value from a fixed 3.7k-bucket array, and histograms of rounds or workers
// merge by adding counts.
//
// Callers: the commands under bench/ (ledgerbench, streambench).
//
// Concurrency: a Histogram is not safe for concurrent use; each goroutine
// records into its own, or the caller holds a lock.
package latency
