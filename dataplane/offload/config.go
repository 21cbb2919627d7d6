package offload

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of Config.
const (
	DefaultDriver         = "aws-s3"
	DefaultRegion         = "us-east-1"
	DefaultMaxBlockSize   = 64 << 20
	DefaultReadBufferSize = 1 << 20
	DefaultReadAhead      = 2
	DefaultCacheSize      = 64 << 20
	DefaultAttempts       = 5
	DefaultRequestTimeout = 30 * time.Second
	DefaultRetryBackoff   = 200 * time.Millisecond
	// MinBlockSize is the smallest block: S3 refuses multipart parts
	// under 5 MiB except the last.
	MinBlockSize = 5 << 20
)

// Config configures the S3 offloader. The names follow Pulsar's broker
// settings (managedLedgerOffloadDriver, s3ManagedLedgerOffloadBucket, ...).
type Config struct {
	// Driver is "aws-s3" or "s3" (any S3-compatible store). Default aws-s3.
	Driver string
	// Bucket holds the objects. Required.
	Bucket string
	// Region of the bucket. Default us-east-1.
	Region string
	// Endpoint is the store's URL (http://host:port) for an S3-compatible
	// server; empty: AWS's endpoint for Region. With an endpoint, requests
	// use path-style addressing.
	Endpoint string
	// Prefix is prepended to every object key (a cluster's share of a
	// bucket in managed mode). Default none.
	Prefix string
	// AccessKeyID and SecretAccessKey are static credentials; both empty:
	// the standard AWS chain (environment, shared files, instance role).
	AccessKeyID, SecretAccessKey string
	// MaxBlockSize is the size of a block (one multipart part) of the
	// data object. Default 64 MiB; at least 5 MiB.
	MaxBlockSize int
	// ReadBufferSize is the size of one range read of the data object.
	// Default 1 MiB.
	ReadBufferSize int
	// ReadAhead is how many further buffers a sequential reader fetches
	// in the background. Default 2; negative disables read-ahead.
	ReadAhead int
	// CacheSize bounds the bytes of range reads kept in memory. Default
	// 64 MiB.
	CacheSize int64
	// Attempts is how often one request is tried before it fails (S3
	// errors other than "not found"/"denied", timeouts, cut connections).
	// Default 5.
	Attempts int
	// RequestTimeout bounds one attempt. Default 30 s.
	RequestTimeout time.Duration
	// RetryBackoff is the pause before the second attempt, doubled for
	// each later one. Default 200 ms.
	RetryBackoff time.Duration
}

// WithDefaults returns c with zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	orDefault(&c.Driver, DefaultDriver)
	orDefault(&c.Region, DefaultRegion)
	orDefault(&c.MaxBlockSize, DefaultMaxBlockSize)
	orDefault(&c.ReadBufferSize, DefaultReadBufferSize)
	orDefault(&c.ReadAhead, DefaultReadAhead)
	orDefault(&c.CacheSize, DefaultCacheSize)
	orDefault(&c.Attempts, DefaultAttempts)
	orDefault(&c.RequestTimeout, DefaultRequestTimeout)
	orDefault(&c.RetryBackoff, DefaultRetryBackoff)
	return c
}

// orDefault sets *p to d when it is the zero value.
func orDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// Validate checks a config after WithDefaults.
func (c Config) Validate() error {
	var errs []error
	if c.Driver != "aws-s3" && c.Driver != "s3" {
		errs = append(errs, fmt.Errorf("driver %q: only aws-s3 and s3 are supported", c.Driver))
	}
	if c.Bucket == "" {
		errs = append(errs, errors.New("bucket is required"))
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		errs = append(errs, errors.New("access key id and secret go together"))
	}
	if c.MaxBlockSize < MinBlockSize || c.MaxBlockSize > 1<<30 {
		errs = append(errs, fmt.Errorf("max block size %d: must be 5 MiB..1 GiB", c.MaxBlockSize))
	}
	if c.ReadBufferSize < 4096 {
		errs = append(errs, fmt.Errorf("read buffer size %d: at least 4096", c.ReadBufferSize))
	}
	if c.Attempts < 1 || c.RequestTimeout <= 0 || c.RetryBackoff < 0 {
		errs = append(errs, errors.New("attempts, request timeout and retry backoff must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("offload: invalid config: %w", err)
	}
	return nil
}
