package apiserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// syncBuffer is a bytes.Buffer safe for the server's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the JSON log lines written so far with message msg.
func (b *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Every HTTP request that is not gRPC gets one access-log line (method,
// path, authenticated principal, status, duration) and is counted in the
// request metrics by method and code.
func TestAccessLogAndHTTPMetrics(t *testing.T) {
	logs := &syncBuffer{}
	st := openStore(t, "sqlite::memory:")
	h := startHarnessWith(t, st, filepath.Join(t.TempDir(), "bootstrap.key"), func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	a := h.setup("logged")[0]
	if code, _ := h.rest(a.key, "GET", "/v1/"+a.org, nil); code != http.StatusOK {
		t.Fatalf("GET org: %d", code)
	}
	if code, _ := h.rest("", "GET", "/v1/"+a.org+"/clusters", nil); code != http.StatusUnauthorized {
		t.Fatalf("GET without key: %d", code)
	}
	if code, _ := h.rest(h.opKey, "DELETE", "/v1/regions/nowhere", nil); code != http.StatusNotFound {
		t.Fatalf("DELETE missing region: %d", code)
	}
	if code, _ := h.rest(a.key, "POST", "/v1/"+a.org+"/serviceAccounts?serviceAccountId=rest", map[string]any{}); code != http.StatusOK {
		t.Fatalf("POST service account: %d", code)
	}
	if code, _ := h.rest("", "GET", "/oauth2/revoked", nil); code != http.StatusOK {
		t.Fatalf("GET revocation list: %d", code)
	}
	resp, err := http.Get(h.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	byPath := map[string]map[string]any{}
	for _, l := range logs.lines(t, "apiserver: http request") {
		byPath[l["method"].(string)+" "+l["path"].(string)] = l
	}
	// At info level: changes and failures; what only read, at debug level.
	for _, want := range []struct {
		key, principal string
		status         float64
		level          string
	}{
		{"GET /v1/" + a.org, a.sa, 200, "DEBUG"},
		{"GET /v1/" + a.org + "/clusters", "-", 401, "INFO"},
		{"DELETE /v1/regions/nowhere", "operators/bootstrap", 404, "INFO"},
		{"POST /v1/" + a.org + "/serviceAccounts", a.sa, 200, "INFO"},
		{"GET /oauth2/revoked", "-", 200, "DEBUG"},
	} {
		l := byPath[want.key]
		if l == nil {
			t.Errorf("no access-log line for %s; have %v", want.key, byPath)
			continue
		}
		if l["principal"] != want.principal || l["status"] != want.status || l["level"] != want.level {
			t.Errorf("%s: %v", want.key, l)
		}
		if d, ok := l["duration_seconds"].(float64); !ok || d <= 0 {
			t.Errorf("%s: duration_seconds %v", want.key, l["duration_seconds"])
		}
	}

	// Counters and histograms by method and code.
	for _, want := range []struct{ metric, method, code string }{
		{"magnetar_controlplane_http_requests_total", "GET", "200"},
		{"magnetar_controlplane_http_requests_total", "GET", "401"},
		{"magnetar_controlplane_http_requests_total", "DELETE", "404"},
		{"magnetar_controlplane_http_request_duration_seconds_count", "DELETE", "404"},
		{"magnetar_controlplane_http_request_duration_seconds_bucket", "GET", "401"},
	} {
		found := false
		for _, line := range strings.Split(string(metricsText), "\n") {
			if strings.HasPrefix(line, want.metric+"{") && strings.Contains(line, `code="`+want.code+`"`) && strings.Contains(line, `method="`+want.method+`"`) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("/metrics has no %s{method=%q,code=%q}", want.metric, want.method, want.code)
		}
	}
	// A client's gRPC calls get a line each; the gateway's calls for REST
	// requests do not (their HTTP line is the one).
	must[*cpv1.ListServiceAccountsResponse](t)(h.sas.ListServiceAccounts(h.authCtx(a.key), &cpv1.ListServiceAccountsRequest{Parent: a.org}))
	_, err = h.regions.GetRegion(t.Context(), &cpv1.GetRegionRequest{Name: "regions/us-east"})
	wantCode(t, err, codes.Unauthenticated, "")
	must[*cpv1.Region](t)(h.agent.Heartbeat(h.authCtx(h.opKey), &cpv1.HeartbeatRequest{Region: "regions/us-east"}))
	must[*cpv1.ServiceAccount](t)(h.sas.CreateServiceAccount(h.authCtx(a.key), &cpv1.CreateServiceAccountRequest{Parent: a.org, ServiceAccountId: "grpc"}))
	calls := map[string]map[string]any{}
	for _, l := range logs.lines(t, "apiserver: grpc call") {
		calls[l["method"].(string)] = l
	}
	for _, want := range []struct{ method, principal, code, level string }{
		{"/magnetar.controlplane.v1.ServiceAccounts/ListServiceAccounts", a.sa, "OK", "DEBUG"},
		{"/magnetar.controlplane.v1.ServiceAccounts/CreateServiceAccount", a.sa, "OK", "INFO"},
		{"/magnetar.controlplane.v1.Regions/GetRegion", "-", "Unauthenticated", "INFO"},
		{"/magnetar.controlplane.v1.RegionAgent/Heartbeat", "operators/bootstrap", "OK", "DEBUG"},
	} {
		l := calls[want.method]
		if l == nil || l["principal"] != want.principal || l["code"] != want.code || l["level"] != want.level {
			t.Errorf("gRPC access-log line for %s: %v", want.method, l)
		}
	}
	if l := calls["/magnetar.controlplane.v1.Organizations/GetOrganization"]; l != nil {
		t.Errorf("a REST request logged as a gRPC call too: %v", l)
	}

	// Scrapes are logged at debug level.
	eventually(t, "the scrape's log line", func() bool {
		for _, l := range logs.lines(t, "apiserver: http request") {
			if l["path"] == "/metrics" {
				return l["level"] == "DEBUG"
			}
		}
		return false
	})
}
