package terraform

import (
	"context"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// flakyRegions is a Regions server that answers the first len(fail) calls
// with those codes, then succeeds; it records each call's authorization.
type flakyRegions struct {
	cpv1.UnimplementedRegionsServer
	mu     sync.Mutex
	fail   []codes.Code
	calls  int
	auth   []string
	called chan struct{} // closed at the first call, when not nil
}

func (f *flakyRegions) ListRegions(ctx context.Context, _ *cpv1.ListRegionsRequest) (*cpv1.ListRegionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth = append(f.auth, strings.Join(md.Get("authorization"), ","))
	f.calls++
	if f.calls == 1 && f.called != nil {
		close(f.called)
	}
	if f.calls <= len(f.fail) {
		return nil, status.Error(f.fail[f.calls-1], "injected")
	}
	return &cpv1.ListRegionsResponse{Regions: []*cpv1.Region{{Name: "regions/r"}}}, nil
}

func serveFlaky(t *testing.T, f *flakyRegions) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	cpv1.RegisterRegionsServer(s, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

func TestRetriesUnavailableAndResourceExhausted(t *testing.T) {
	cases := []struct {
		name      string
		fail      []codes.Code
		retries   int
		wantCode  codes.Code
		wantCalls int
	}{
		{"recovers", []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.Unavailable}, 5, codes.OK, 4},
		{"gives up", []codes.Code{codes.Unavailable, codes.Unavailable, codes.Unavailable}, 2, codes.Unavailable, 3},
		{"no retry of a client error", []codes.Code{codes.InvalidArgument}, 5, codes.InvalidArgument, 1},
		{"no retry of a stale etag", []codes.Code{codes.Aborted}, 5, codes.Aborted, 1},
		{"retries off", []codes.Code{codes.Unavailable}, -1, codes.Unavailable, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &flakyRegions{fail: tc.fail}
			c, err := NewClient(ClientConfig{Endpoint: "http://" + serveFlaky(t, f), APIKey: "k1", MaxRetries: tc.retries, BaseBackoff: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Regions.ListRegions(context.Background(), &cpv1.ListRegionsRequest{})
			if status.Code(err) != tc.wantCode {
				t.Fatalf("ListRegions: %v, want %v", err, tc.wantCode)
			}
			if f.calls != tc.wantCalls {
				t.Fatalf("%d calls, want %d", f.calls, tc.wantCalls)
			}
			for i, a := range f.auth {
				if a != "Bearer k1" {
					t.Fatalf("call %d authorization %q", i, a)
				}
			}
		})
	}
}

func TestRetryStopsWithContext(t *testing.T) {
	f := &flakyRegions{fail: []codes.Code{codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable},
		called: make(chan struct{})}
	c, err := NewClient(ClientConfig{Endpoint: serveFlaky(t, f), APIKey: "k", MaxRetries: 10, BaseBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Cancel once the first attempt reached the server: the retry
		// must not wait out its hour of backoff.
		<-f.called
		cancel()
	}()
	_, err = c.Regions.ListRegions(ctx, &cpv1.ListRegionsRequest{})
	<-done
	// The cancel may land before or after the first answer arrives.
	if code := status.Code(err); code != codes.Unavailable && code != codes.Canceled {
		t.Fatalf("ListRegions: %v, want UNAVAILABLE or CANCELED", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls != 1 {
		t.Fatalf("%d calls after cancel, want 1", f.calls)
	}
}

func TestBackoffBounds(t *testing.T) {
	base := 200 * time.Millisecond
	for n := 0; n < 40; n++ {
		d := backoff(base, n)
		want := min(base<<min(n, 10), 5*time.Second)
		if d > want || d < want-want/4 {
			t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, want-want/4, want)
		}
	}
}

func TestUpdateFreshRereadsOnAborted(t *testing.T) {
	var sent []string
	reads := 0
	out, err := updateFresh(context.Background(), "e1", func(context.Context) (string, error) {
		reads++
		return "e2", nil
	}, func(_ context.Context, etag string) (string, error) {
		sent = append(sent, etag)
		if etag != "e2" {
			return "", status.Error(codes.Aborted, "etag mismatch")
		}
		return "updated", nil
	})
	if err != nil || out != "updated" || reads != 1 || strings.Join(sent, ",") != "e1,e2" {
		t.Fatalf("out %q err %v reads %d sent %v", out, err, reads, sent)
	}
	// An etag that stays stale gives up after maxAbortedRetries re-reads.
	sent = nil
	_, err = updateFresh(context.Background(), "e1", func(context.Context) (string, error) { return "e1", nil },
		func(_ context.Context, etag string) (string, error) {
			sent = append(sent, etag)
			return "", status.Error(codes.Aborted, "etag mismatch")
		})
	if status.Code(err) != codes.Aborted || len(sent) != maxAbortedRetries+1 {
		t.Fatalf("err %v after %d sends", err, len(sent))
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct{ in, target, err string }{
		{"127.0.0.1:7080", "127.0.0.1:7080", ""},
		{"http://127.0.0.1:7080/", "127.0.0.1:7080", ""},
		{"https://cp.example:443", "cp.example:443", ""},
		{"ftp://x:1", "", "scheme must be http or https"},
		{"http://x:1/v1", "", "want host:port"},
		{"", "", "want host:port"},
	} {
		target, _, err := parseEndpoint(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseEndpoint(%q): %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || target != tc.target {
			t.Errorf("parseEndpoint(%q) = %q, %v; want %q", tc.in, target, err, tc.target)
		}
	}
}

func TestKindResolve(t *testing.T) {
	for _, tc := range []struct {
		k       kind
		in, out string
	}{
		{kindOrganization, "acme", "organizations/acme"},
		{kindOrganization, "organizations/acme", "organizations/acme"},
		{kindCluster, "acme/dev", "organizations/acme/clusters/dev"},
		{kindAPIKey, "acme/ci/k1", "organizations/acme/serviceAccounts/ci/apiKeys/k1"},
		{kindTopic, "organizations/a/clusters/c/tenants/t/namespaces/n/topics/x", "organizations/a/clusters/c/tenants/t/namespaces/n/topics/x"},
		{kindTopic, "a/c/t/n/x", "organizations/a/clusters/c/tenants/t/namespaces/n/topics/x"},
		{kindCluster, "acme", ""},
		{kindCluster, "acme//", ""},
		{kindCluster, "organizations/acme/tenants/dev", ""},
	} {
		got, err := tc.k.resolve(tc.in)
		if tc.out == "" {
			if err == nil {
				t.Errorf("%v.resolve(%q) = %q, want an error", tc.k, tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.out {
			t.Errorf("%v.resolve(%q) = %q, %v; want %q", tc.k, tc.in, got, err, tc.out)
		}
	}
	if p, id := split("organizations/acme/clusters/dev"); p != "organizations/acme" || id != "dev" {
		t.Errorf("split: %q %q", p, id)
	}
	if p, id := split("organizations/acme"); p != "" || id != "acme" {
		t.Errorf("split: %q %q", p, id)
	}
}

// TestPatternsMatchThePolicy keeps the plan-time id rules equal to the
// admission policy the API enforces.
func TestPatternsMatchThePolicy(t *testing.T) {
	raw, err := os.ReadFile("../policy/rego/admission.rego")
	if err != nil {
		t.Fatal(err)
	}
	for name, re := range map[string]*regexp.Regexp{"id_pattern": controlPlaneID, "pulsar_pattern": pulsarID} {
		m := regexp.MustCompile(name + " := `([^`]+)`").FindSubmatch(raw)
		if m == nil {
			t.Fatalf("no %s in admission.rego", name)
		}
		if string(m[1]) != re.String() {
			t.Errorf("%s is %s in the policy, %s in the provider", name, m[1], re)
		}
	}
	src, err := os.ReadFile("../controlplane/apiserver/crud.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "regexp.MustCompile(`"+looseID.String()+"`)") {
		t.Errorf("the API server's idPattern is no longer %s", looseID)
	}
}

func writeKey(path, body string) error { return os.WriteFile(path, []byte(body), 0o600) }
