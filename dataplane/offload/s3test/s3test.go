// Package s3test starts a real S3 server for tests: versitygw
// (github.com/versity/versitygw) with its POSIX backend, on a free loopback
// port, with a fresh directory as its storage. The binary is found through
// $MAGNETAR_VERSITYGW, then PATH, then $(go env GOPATH)/bin; .ci/run
// installs it there (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0).
// Without it a test is skipped with a message, unless
// MAGNETAR_REQUIRE_S3=1, when it fails.
//
// A Server is owned by the test that started it: it is stopped at cleanup.
package s3test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/magnetar-dev/magnetar/internal/freeport"
)

// Version is the versitygw release the tests are written against.
const Version = "v1.8.0"

// Credentials of the server's root account.
const (
	AccessKey = "magnetar-test"
	SecretKey = "magnetar-test-secret"
	Region    = "us-east-1"
)

// Server is a running versitygw.
type Server struct {
	// Endpoint is the server's URL (http://127.0.0.1:port).
	Endpoint string
	// Addr is its host:port.
	Addr string
	// Dir is the POSIX root: each bucket is a directory in it.
	Dir string

	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// Binary returns the versitygw binary's path, or "" and why not.
func Binary() (string, string) {
	if p := os.Getenv("MAGNETAR_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", "MAGNETAR_VERSITYGW: " + err.Error()
		}
		return p, ""
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, ""
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "versitygw")
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p, ""
			}
		}
	}
	return "", "versitygw not found (set MAGNETAR_VERSITYGW, or: go install github.com/versity/versitygw/cmd/versitygw@" + Version + ")"
}

// Start starts a server for tb (stopped at its cleanup) and waits until it
// answers; without the binary it skips tb (fails it under
// MAGNETAR_REQUIRE_S3=1).
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, why := Binary()
	if bin == "" {
		if os.Getenv("MAGNETAR_REQUIRE_S3") == "1" {
			tb.Fatal(why)
		}
		tb.Skip(why)
	}
	s, err := StartServer(bin, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartServer starts bin on a free loopback port with dir as its POSIX
// root and waits until it listens. The caller must Stop it.
func StartServer(bin, dir string) (*Server, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	s := &Server{Endpoint: "http://" + addr, Addr: addr, Dir: dir, out: &lockedBuffer{b: &bytes.Buffer{}}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "--port", addr, "--access", AccessKey, "--secret", SecretKey,
		"--region", Region, "--quiet", "posix", s.Dir)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("versitygw exited: %s", s.out.String())
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("versitygw did not listen on %s: %s", addr, s.out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling for the port
	}
}

// Stop kills the server and waits for it to exit.
func (s *Server) Stop() {
	s.cmd.Process.Kill()
	<-s.done
}

// Client returns an S3 client of the server's root account at endpoint
// (the server's own when empty: a test may go through a proxy).
func (s *Server) Client(endpoint string) *s3.Client {
	if endpoint == "" {
		endpoint = s.Endpoint
	}
	return s3.New(s3.Options{
		Region:                     Region,
		BaseEndpoint:               aws.String(endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// CreateBucket creates a bucket.
func (s *Server) CreateBucket(tb testing.TB, name string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client("").CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Fatalf("create bucket %s: %v", name, err)
	}
}

// Keys lists the object keys of a bucket.
func (s *Server) Keys(tb testing.TB, bucket string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.Client(""), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			tb.Fatalf("list %s: %v", bucket, err)
		}
		for _, o := range out.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys
}

// Uploads lists the keys of unfinished multipart uploads of a bucket.
func (s *Server) Uploads(tb testing.TB, bucket string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.Client("").ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		tb.Fatalf("list uploads of %s: %v", bucket, err)
	}
	var keys []string
	for _, u := range out.Uploads {
		keys = append(keys, aws.ToString(u.Key))
	}
	return keys
}

// Output returns what the server printed.
func (s *Server) Output() string { return s.out.String() }

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
