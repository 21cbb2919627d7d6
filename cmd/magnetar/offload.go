package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
	"github.com/magnetar-dev/magnetar/dataplane/offload"
)

// offloadFlags are the tiered-storage flags of `standalone` and `broker`,
// named after Pulsar's broker settings (docs/tiered-storage.md).
type offloadFlags struct {
	cfg                         offload.Config
	thresholdBytes, thresholdS  int64
	deletionLagMs               int64
	maxBlockSize, readBufferLen int
}

func (o *offloadFlags) register(f *pflag.FlagSet) {
	f.StringVar(&o.cfg.Driver, "managed-ledger-offload-driver", offload.DefaultDriver, "tiered storage driver: aws-s3 or s3 (any S3-compatible store)")
	f.StringVar(&o.cfg.Bucket, "s3-managed-ledger-offload-bucket", "", "bucket closed ledgers are offloaded to (empty: no tiered storage)")
	f.StringVar(&o.cfg.Region, "s3-managed-ledger-offload-region", offload.DefaultRegion, "region of the offload bucket")
	f.StringVar(&o.cfg.Endpoint, "s3-managed-ledger-offload-service-endpoint", "", "URL of an S3-compatible store (empty: AWS's endpoint of the region)")
	f.StringVar(&o.cfg.Prefix, "managed-ledger-offload-prefix", "", "prefix of every object key (a cluster's share of a bucket)")
	f.StringVar(&o.cfg.AccessKeyID, "s3-managed-ledger-offload-credential-id", "", "access key id (empty: the standard AWS chain: AWS_ACCESS_KEY_ID, shared files, instance role)")
	f.StringVar(&o.cfg.SecretAccessKey, "s3-managed-ledger-offload-credential-secret", "", "secret access key, with --s3-managed-ledger-offload-credential-id")
	f.IntVar(&o.maxBlockSize, "s3-managed-ledger-offload-max-block-size-in-bytes", offload.DefaultMaxBlockSize, "block (multipart part) size of offloaded data objects, at least 5 MiB")
	f.IntVar(&o.readBufferLen, "s3-managed-ledger-offload-read-buffer-size-in-bytes", offload.DefaultReadBufferSize, "size of one range read of an offloaded ledger")
	f.Int64Var(&o.thresholdBytes, "managed-ledger-offload-threshold-in-bytes", -1, "default for namespaces without offload policies: bytes kept on bookies before closed ledgers are offloaded (-1: no automatic offload)")
	f.Int64Var(&o.thresholdS, "managed-ledger-offload-threshold-in-seconds", -1, "default for namespaces without offload policies: offload ledgers closed this long ago (-1: not by age)")
	f.Int64Var(&o.deletionLagMs, "managed-ledger-offload-deletion-lag-ms", ledger.DefaultOffloadDeletionLag.Milliseconds(), "how long after its offload a ledger's bookie copy is deleted")
}

// apply returns the offloader's config and the default policy.
func (o *offloadFlags) apply() (offload.Config, ledger.OffloadPolicy) {
	c := o.cfg
	c.MaxBlockSize, c.ReadBufferSize = o.maxBlockSize, o.readBufferLen
	var p ledger.OffloadPolicy
	if o.thresholdBytes >= 0 {
		p.Enabled, p.Threshold = true, o.thresholdBytes
	}
	if o.thresholdS >= 0 {
		p.Enabled, p.ThresholdAge = true, time.Duration(o.thresholdS)*time.Second
		if o.thresholdBytes < 0 {
			p.Threshold = 1 << 62 // by age only
		}
	}
	p.DeletionLag = time.Duration(o.deletionLagMs) * time.Millisecond
	if o.deletionLagMs <= 0 {
		p.DeletionLag = -1
	}
	return c, p
}
