package offload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/magnetar-dev/magnetar/dataplane/ledger"
)

// Driver metadata keys stored in the managed ledger's record.
const (
	metaDriver   = "driver"
	metaBucket   = "bucket"
	metaRegion   = "region"
	metaEndpoint = "endpoint"
	metaPrefix   = "prefix"
	metaDataLen  = "dataLength"
	metaBlocks   = "blocks"
)

// S3 is the offloader over an S3-compatible object store. It is safe for
// concurrent use; Close stops its read-ahead goroutines.
type S3 struct {
	cfg Config
	log *slog.Logger
	aws aws.Config

	mu      sync.Mutex
	clients map[string]*s3.Client // by region + endpoint
	indexes map[string]*index     // by index key; bounded by maxIndexes
	order   []string              // indexes, oldest first
	seq     map[string]int64      // by data key: the chunk after the last read (read-ahead); bounded by maxIndexes
	cache   *chunkCache

	stats Stats

	stopCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup // read-ahead fetches
}

// maxIndexes bounds the decoded indexes kept (each holds 8 bytes per
// entry).
const maxIndexes = 256

// Stats counts the offloader's work since New.
type Stats struct {
	BytesUploaded, PartsUploaded   atomic.Int64
	BytesRead, RangeReads          atomic.Int64
	CacheHits, ReadAheads, Retries atomic.Int64
}

var _ ledger.Offloader = (*S3)(nil)

// New returns an S3 offloader. Credentials come from cfg or, when it has
// none, from the standard AWS chain; nothing is contacted yet.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*S3, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(cfg.Region),
		// Retries are ours (do), with a timeout per attempt.
		awsconfig.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = 32
		})),
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, "")))
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("offload: AWS configuration: %w", err)
	}
	// Our objects carry their own checksums (doc.go); whole-object
	// checksums cannot be checked on range reads anyway.
	ac.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	ac.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	s := &S3{cfg: cfg, log: log, aws: ac, clients: map[string]*s3.Client{}, indexes: map[string]*index{},
		seq: map[string]int64{}, cache: newChunkCache(cfg.CacheSize)}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	return s, nil
}

// Close stops read-ahead and waits for it.
func (s *S3) Close() error {
	s.stop()
	s.wg.Wait()
	return nil
}

// Stats returns the counters.
func (s *S3) Stats() *Stats { return &s.stats }

// Config returns the effective configuration.
func (s *S3) Config() Config { return s.cfg }

// client returns the S3 client of a region and endpoint.
func (s *S3) client(region, endpoint string) *s3.Client {
	key := region + "|" + endpoint
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clients[key]; c != nil {
		return c
	}
	c := s3.NewFromConfig(s.aws, func(o *s3.Options) {
		o.Region = region
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
	})
	s.clients[key] = c
	return c
}

// Location implements ledger.Offloader.
func (s *S3) Location(t ledger.OffloadTarget) (map[string]string, error) {
	loc := map[string]string{
		metaDriver: s.cfg.Driver, metaBucket: s.cfg.Bucket, metaRegion: s.cfg.Region,
		metaEndpoint: s.cfg.Endpoint, metaPrefix: s.cfg.Prefix,
	}
	if t.Bucket != "" {
		loc[metaBucket] = t.Bucket
	}
	if t.Region != "" {
		loc[metaRegion] = t.Region
	}
	if t.Endpoint != "" {
		loc[metaEndpoint] = t.Endpoint
	}
	return loc, nil
}

// place is where one ledger's objects are.
type place struct {
	cl                *s3.Client
	bucket            string
	dataKey, indexKey string
}

func (s *S3) place(meta map[string]string, ledgerID int64, uid string) (place, error) {
	if d := meta[metaDriver]; d != "aws-s3" && d != "s3" {
		return place{}, fmt.Errorf("offload: driver %q of ledger %d is not S3", d, ledgerID)
	}
	if meta[metaBucket] == "" || uid == "" {
		return place{}, fmt.Errorf("offload: ledger %d: driver metadata without bucket or uid", ledgerID)
	}
	region := meta[metaRegion]
	if region == "" {
		region = s.cfg.Region
	}
	data := meta[metaPrefix] + uid + "-ledger-" + strconv.FormatInt(ledgerID, 10)
	return place{cl: s.client(region, meta[metaEndpoint]), bucket: meta[metaBucket], dataKey: data, indexKey: data + "-index"}, nil
}

// Offload implements ledger.Offloader: the ledger's entries go to a data
// object by multipart upload, one part per block, then the index object
// is written. On failure the multipart upload is aborted.
func (s *S3) Offload(ctx context.Context, src ledger.OffloadSource, uid string, loc map[string]string) (map[string]string, error) {
	id := src.LedgerID()
	p, err := s.place(loc, id, uid)
	if err != nil {
		return nil, err
	}
	var uploadID string
	err = s.do(ctx, "create upload of "+p.dataKey, func(ctx context.Context) error {
		out, err := p.cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &p.bucket, Key: &p.dataKey})
		if err == nil {
			uploadID = aws.ToString(out.UploadId)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	x, err := s.upload(ctx, p, uploadID, src)
	if err != nil {
		actx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
		defer cancel()
		if aerr := s.abort(actx, p, uploadID); aerr != nil {
			s.log.Warn("offload: abort of a failed upload failed (the next clean-up retries)", "key", p.dataKey, "err", aerr)
		}
		return nil, err
	}
	b, err := x.encode()
	if err != nil {
		return nil, err
	}
	err = s.do(ctx, "put index "+p.indexKey, func(ctx context.Context) error {
		_, err := p.cl.PutObject(ctx, &s3.PutObjectInput{Bucket: &p.bucket, Key: &p.indexKey,
			Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b)))})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.stats.BytesUploaded.Add(int64(len(b)))
	meta := maps.Clone(loc)
	meta[metaDataLen] = strconv.FormatInt(x.DataLen, 10)
	meta[metaBlocks] = strconv.Itoa(len(x.Blocks))
	return meta, nil
}

// upload writes the blocks of the data object and completes the upload.
// Reading the next block from the bookies overlaps the upload of the
// previous one.
func (s *S3) upload(ctx context.Context, p place, uploadID string, src ledger.OffloadSource) (*index, error) {
	x := &index{LedgerID: src.LedgerID(), Entries: src.Entries(), BlockSize: int64(s.cfg.MaxBlockSize),
		Metadata: src.Metadata(), Offsets: make([]int64, 0, src.Entries())}
	type part struct {
		n    int32
		data []byte
	}
	parts := make(chan part, 1)
	var completed []types.CompletedPart
	upErr := make(chan error, 1)
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		var err error
		for pt := range parts {
			if err != nil {
				continue // drain
			}
			var etag *string
			err = s.do(uctx, fmt.Sprintf("upload part %d of %s", pt.n, p.dataKey), func(ctx context.Context) error {
				out, err := p.cl.UploadPart(ctx, &s3.UploadPartInput{Bucket: &p.bucket, Key: &p.dataKey,
					UploadId: &uploadID, PartNumber: aws.Int32(pt.n),
					Body: bytes.NewReader(pt.data), ContentLength: aws.Int64(int64(len(pt.data)))})
				if err == nil {
					etag = out.ETag
				}
				return err
			})
			if err == nil {
				completed = append(completed, types.CompletedPart{ETag: etag, PartNumber: aws.Int32(pt.n)})
				s.stats.BytesUploaded.Add(int64(len(pt.data)))
				s.stats.PartsUploaded.Add(1)
			} else {
				cancel()
			}
		}
		upErr <- err
	}()
	readErr := func() error {
		defer close(parts)
		var bb blockBuilder
		bb.reset(0)
		flush := func() error {
			data := bytes.Clone(bb.finish())
			n := int32(len(x.Blocks) + 1)
			x.Blocks = append(x.Blocks, blockRef{First: bb.first, Part: n, Offset: x.DataLen, Length: int64(len(data))})
			x.DataLen += int64(len(data))
			select {
			case parts <- part{n, data}:
				return nil
			case <-uctx.Done():
				return uctx.Err()
			}
		}
		const chunk = 256
		for first := int64(0); first < x.Entries; first += chunk {
			last := min(first+chunk-1, x.Entries-1)
			ents, err := src.Read(uctx, first, last)
			if err != nil {
				return fmt.Errorf("offload: read ledger %d entries %d..%d: %w", x.LedgerID, first, last, err)
			}
			if int64(len(ents)) != last-first+1 {
				return fmt.Errorf("offload: ledger %d: read %d entries of %d..%d", x.LedgerID, len(ents), first, last)
			}
			for i, e := range ents {
				id := first + int64(i)
				if e.Pos.EntryID != id {
					return fmt.Errorf("offload: ledger %d: entry %d where %d was expected", x.LedgerID, e.Pos.EntryID, id)
				}
				x.Offsets = append(x.Offsets, x.DataLen+int64(len(bb.buf)))
				bb.add(id, e.Data)
				if len(bb.buf) >= s.cfg.MaxBlockSize {
					// A full block: parts but the last must reach
					// S3's minimum, so a block ends after the entry that
					// fills it.
					if err := flush(); err != nil {
						return err
					}
					bb.reset(id + 1)
				}
			}
		}
		if bb.entries == 0 && len(x.Blocks) > 0 {
			return nil
		}
		return flush()
	}()
	if err := <-upErr; err != nil {
		return nil, err
	}
	if readErr != nil {
		return nil, readErr
	}
	err := s.do(ctx, "complete upload of "+p.dataKey, func(ctx context.Context) error {
		_, err := p.cl.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &p.bucket, Key: &p.dataKey,
			UploadId: &uploadID, MultipartUpload: &types.CompletedMultipartUpload{Parts: completed}})
		return err
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

func (s *S3) abort(ctx context.Context, p place, uploadID string) error {
	err := s.do(ctx, "abort upload of "+p.dataKey, func(ctx context.Context) error {
		_, err := p.cl.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &p.bucket, Key: &p.dataKey, UploadId: &uploadID})
		return err
	})
	if isNotFound(err) {
		return nil
	}
	return err
}

// DeleteOffloaded implements ledger.Offloader: the data and index objects
// and every unfinished multipart upload of the data object go.
func (s *S3) DeleteOffloaded(ctx context.Context, ledgerID int64, uid string, meta map[string]string) error {
	p, err := s.place(meta, ledgerID, uid)
	if err != nil {
		return err
	}
	var uploads []string
	err = s.do(ctx, "list uploads of "+p.dataKey, func(ctx context.Context) error {
		uploads = uploads[:0]
		out, err := p.cl.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &p.bucket, Prefix: &p.dataKey})
		if err != nil {
			return err
		}
		for _, u := range out.Uploads {
			if aws.ToString(u.Key) == p.dataKey {
				uploads = append(uploads, aws.ToString(u.UploadId))
			}
		}
		return nil
	})
	if isNoBucket(err) {
		return nil // no bucket: no copy either
	}
	if err != nil {
		return err
	}
	for _, u := range uploads {
		if err := s.abort(ctx, p, u); err != nil {
			return err
		}
	}
	for _, key := range []string{p.dataKey, p.indexKey} {
		err := s.do(ctx, "delete "+key, func(ctx context.Context) error {
			_, err := p.cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &p.bucket, Key: &key})
			return err
		})
		if err != nil && !isNotFound(err) {
			return err
		}
	}
	s.mu.Lock()
	if _, ok := s.indexes[p.indexKey]; ok {
		delete(s.indexes, p.indexKey)
	}
	delete(s.seq, p.dataKey)
	s.mu.Unlock()
	s.cache.dropObject(p.bucket + "/" + p.dataKey)
	return nil
}

// ReadOffloaded implements ledger.Offloader: the index (cached) locates
// the entries; their bytes come from range reads of ReadBufferSize,
// cached, and a sequential reader's next buffers are fetched ahead.
func (s *S3) ReadOffloaded(ctx context.Context, ledgerID int64, uid string, meta map[string]string, first, last int64) ([]ledger.Entry, error) {
	p, err := s.place(meta, ledgerID, uid)
	if err != nil {
		return nil, err
	}
	x, err := s.index(ctx, p)
	if err != nil {
		return nil, err
	}
	from, to, err := x.span(first, last)
	if err != nil {
		return nil, err
	}
	rb := int64(s.cfg.ReadBufferSize)
	c0, c1 := from/rb, (to-1)/rb
	obj := p.bucket + "/" + p.dataKey
	chunks := make([][]byte, 0, c1-c0+1)
	for c := c0; c <= c1; c++ {
		b, err := s.chunk(ctx, p, obj, x, c)
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, b)
	}
	var data []byte
	if len(chunks) == 1 {
		data = chunks[0]
	} else {
		data = bytes.Join(chunks, nil)
	}
	recs, err := x.parseEntries(data, c0*rb, first, last)
	if err != nil {
		return nil, fmt.Errorf("offload: %s: %w", p.dataKey, err)
	}
	out := make([]ledger.Entry, len(recs))
	for i, r := range recs {
		out[i] = ledger.Entry{Pos: ledger.Position{LedgerID: ledgerID, EntryID: r.id}, Data: r.data}
	}
	s.readAhead(p, obj, x, c0, c1)
	return out, nil
}

// readAhead fetches the buffers after c1 in the background when this read
// continued the previous one of the object.
func (s *S3) readAhead(p place, obj string, x *index, c0, c1 int64) {
	if s.cfg.ReadAhead <= 0 {
		return
	}
	s.mu.Lock()
	prev, seen := s.seq[p.dataKey]
	if len(s.seq) >= maxIndexes && !seen {
		clear(s.seq) // bounded: readers of forgotten objects start over
	}
	s.seq[p.dataKey] = c1 + 1
	s.mu.Unlock()
	if !seen || c0 > prev || c0+1 < prev {
		return // not sequential
	}
	rb := int64(s.cfg.ReadBufferSize)
	for c := c1 + 1; c <= c1+int64(s.cfg.ReadAhead) && c*rb < x.DataLen; c++ {
		if !s.cache.want(obj, c) {
			continue
		}
		s.stats.ReadAheads.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if _, err := s.chunk(s.stopCtx, p, obj, x, c); err != nil && s.stopCtx.Err() == nil {
				s.log.Debug("offload: read-ahead failed", "key", p.dataKey, "chunk", c, "err", err)
			}
		}()
	}
}

// chunk returns buffer c of the data object, from the cache or by one
// range read (concurrent callers share one read).
func (s *S3) chunk(ctx context.Context, p place, obj string, x *index, c int64) ([]byte, error) {
	rb := int64(s.cfg.ReadBufferSize)
	lo, hi := c*rb, min((c+1)*rb, x.DataLen)
	return s.cache.get(ctx, obj, c, &s.stats, func(ctx context.Context) ([]byte, error) {
		var data []byte
		err := s.do(ctx, fmt.Sprintf("read %s bytes %d-%d", p.dataKey, lo, hi-1), func(ctx context.Context) error {
			out, err := p.cl.GetObject(ctx, &s3.GetObjectInput{Bucket: &p.bucket, Key: &p.dataKey,
				Range: aws.String(fmt.Sprintf("bytes=%d-%d", lo, hi-1))})
			if err != nil {
				return err
			}
			defer out.Body.Close()
			b := make([]byte, hi-lo)
			if _, err := io.ReadFull(out.Body, b); err != nil {
				return fmt.Errorf("read body: %w", err)
			}
			data = b
			return nil
		})
		if err == nil {
			s.stats.RangeReads.Add(1)
			s.stats.BytesRead.Add(int64(len(data)))
		}
		return data, err
	})
}

// index returns the decoded index object of a ledger (cached).
func (s *S3) index(ctx context.Context, p place) (*index, error) {
	s.mu.Lock()
	x := s.indexes[p.indexKey]
	s.mu.Unlock()
	if x != nil {
		return x, nil
	}
	var b []byte
	err := s.do(ctx, "read index "+p.indexKey, func(ctx context.Context) error {
		out, err := p.cl.GetObject(ctx, &s3.GetObjectInput{Bucket: &p.bucket, Key: &p.indexKey})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		b, err = io.ReadAll(out.Body)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.stats.BytesRead.Add(int64(len(b)))
	if x, err = decodeIndex(b); err != nil {
		return nil, fmt.Errorf("offload: %s: %w", p.indexKey, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.indexes[p.indexKey]; !ok {
		s.order = append(s.order, p.indexKey)
		for len(s.order) > maxIndexes {
			delete(s.indexes, s.order[0])
			s.order = s.order[1:]
		}
	}
	s.indexes[p.indexKey] = x
	return x, nil
}

// do runs one S3 request, each attempt within RequestTimeout, retrying
// what may succeed on a later attempt with exponential backoff.
func (s *S3) do(ctx context.Context, what string, fn func(context.Context) error) error {
	backoff := s.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("offload: %s: %w", what, ctx.Err())
		}
		if !retriable(err) || attempt >= s.cfg.Attempts {
			return fmt.Errorf("offload: %s (attempt %d): %w", what, attempt, err)
		}
		s.stats.Retries.Add(1)
		s.log.Debug("offload: request failed; retrying", "request", what, "attempt", attempt, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("offload: %s: %w", what, ctx.Err())
		}
		backoff *= 2
	}
}

// retriable reports whether a failed request may succeed when tried
// again: answers other than client errors, and every transport failure
// (timeouts, refused or cut connections).
func retriable(err error) bool {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		c := re.HTTPStatusCode()
		return c >= 500 || c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c == 0
	}
	return true
}

func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	var nk *types.NoSuchKey
	var nu *types.NoSuchUpload
	if errors.As(err, &nk) || errors.As(err, &nu) {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchUpload":
			return true
		}
	}
	return false
}

// DropCache forgets every cached range read and index (tests, benchmarks:
// the next read is cold).
func (s *S3) DropCache() {
	s.mu.Lock()
	s.indexes, s.order, s.seq = map[string]*index{}, nil, map[string]int64{}
	s.mu.Unlock()
	s.cache.dropAll()
}

func isNoBucket(err error) bool {
	var nb *types.NoSuchBucket
	var ae smithy.APIError
	return errors.As(err, &nb) || errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket"
}
