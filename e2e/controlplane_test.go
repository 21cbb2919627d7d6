package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/controlplane/issuer"
)

// cpClient calls the control plane's REST API.
type cpClient struct {
	t    *testing.T
	base string // http://host:port
}

// call sends a JSON request authenticated with key and decodes the answer.
func (c cpClient) call(key, method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, map[string]any{"transport_error": err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			c.t.Fatalf("%s %s: bad JSON %q", method, path, raw)
		}
	}
	return resp.StatusCode, out
}

// mustCall is call that fails the test unless the status is 200.
func (c cpClient) mustCall(key, method, path string, body any) map[string]any {
	c.t.Helper()
	code, out := c.call(key, method, path, body)
	if code != http.StatusOK {
		c.t.Fatalf("%s %s: %d %v", method, path, code, out)
	}
	return out
}

// waitOp polls the operation until it is done (the control plane may be
// down for part of the time) and returns it.
func (c cpClient) waitOp(key, name string, timeout time.Duration) map[string]any {
	c.t.Helper()
	var last map[string]any
	waitFor(c.t, "operation "+name+" to finish", timeout, func() bool {
		code, op := c.call(key, "POST", "/v1/"+name+":wait", map[string]any{"timeout": "5s"})
		last = op
		return code == http.StatusOK && op["done"] == true
	})
	if last["state"] != "SUCCEEDED" {
		c.t.Fatalf("operation %s: %v", name, last)
	}
	return last
}

// readKey waits for the bootstrap key file and returns the key.
func readKey(t *testing.T, path string) string {
	t.Helper()
	var key string
	waitFor(t, "the bootstrap key "+path, 30*time.Second, func() bool {
		raw, err := os.ReadFile(path)
		key = strings.TrimSpace(string(raw))
		return err == nil && key != ""
	})
	return key
}

// interruptOnCleanup stops p with SIGINT when the test ends (before the
// harness's SIGKILL), so it can stop the processes it started.
func interruptOnCleanup(t *testing.T, p *Process) {
	t.Cleanup(func() {
		p.mu.Lock()
		cmd, exited := p.cmd, p.exited
		p.mu.Unlock()
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			t.Errorf("%s did not exit within 60s of SIGINT", p.name)
		}
	})
}

// killDataPlaneOnCleanup kills, when the test ends, every data-plane
// process recorded under dir by a process provisioner (they outlive the
// agent by design). When the test failed and $MAGNETAR_E2E_KEEP names a
// directory, the processes' logs are copied there first.
func killDataPlaneOnCleanup(t *testing.T, dir string) {
	t.Cleanup(func() {
		if keep := os.Getenv("MAGNETAR_E2E_KEEP"); keep != "" && t.Failed() {
			keepLogs(t, dir, keep)
		}
		filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "state.json" {
				return nil
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			var st struct {
				Metadata *struct{ PID int }
				Bookies  []struct{ PID int }
				Brokers  []struct{ PID int }
			}
			if json.Unmarshal(raw, &st) != nil {
				return nil
			}
			pids := []int{}
			if st.Metadata != nil {
				pids = append(pids, st.Metadata.PID)
			}
			for _, b := range append(st.Bookies, st.Brokers...) {
				pids = append(pids, b.PID)
			}
			for _, pid := range pids {
				if pid > 0 && strings.HasPrefix(cmdline(pid), Binary(t)+" ") {
					syscall.Kill(-pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	})
}

// keepLogs copies every process log (*.log, at most two levels) under dir to keep/<test name>/, keeping
// the relative paths.
func keepLogs(t *testing.T, dir, keep string) {
	dst := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"), filepath.Base(dir))
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(d.Name(), ".log") {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		if strings.Count(rel, string(filepath.Separator)) > 2 {
			return nil // a storage file (entry logs, index), not a process log
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		out := filepath.Join(dst, rel)
		if os.MkdirAll(filepath.Dir(out), 0o755) == nil && os.WriteFile(out, raw, 0o644) == nil {
			t.Logf("kept %s", out)
		}
		return nil
	})
}

func cmdline(pid int) string {
	raw, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(raw), "\x00", " ")
}

// roundTrip produces one message on a's cluster and consumes it.
func roundTrip(t *testing.T, a clusterAccess, topic string) {
	t.Helper()
	serviceURL := a.serviceURL
	cl, err := pulsar.NewClient(a.options())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "e2e",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe %s on %s: %v", topic, serviceURL, err)
	}
	defer cons.Close()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer %s on %s: %v", topic, serviceURL, err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := "hello from " + topic
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(want)}); err != nil {
		t.Fatalf("send on %s: %v", serviceURL, err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatalf("receive on %s: %v", serviceURL, err)
	}
	if string(m.Payload()) != want {
		t.Fatalf("received %q, want %q", m.Payload(), want)
	}
	cons.Ack(m)
}

// TestUp runs `magnetar up` and uses it as a tenant would: an organization,
// a service account with an org.admin key, a cluster in each region,
// messages through each, deletion protection.
func TestUp(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	// Waits on processes and intervals: runs beside the other control-plane
	// tests, after the package's sequential ones.
	t.Parallel()
	dir := t.TempDir()
	killDataPlaneOnCleanup(t, dir)
	addr := FreeAddr(t)
	p := Start(t, "up", "up", "--data-dir", dir, "--listen", addr)
	interruptOnCleanup(t, p)
	p.WaitListening(addr, 30*time.Second)
	opKey := readKey(t, filepath.Join(dir, "bootstrap.key"))
	cp := cpClient{t: t, base: "http://" + addr}
	waitFor(t, "the regions to be registered", 30*time.Second, func() bool {
		code, out := cp.call(opKey, "GET", "/v1/regions", nil)
		regs, _ := out["regions"].([]any)
		return code == http.StatusOK && len(regs) == 2
	})

	cp.mustCall(opKey, "POST", "/v1/organizations?organizationId=acme", map[string]any{"displayName": "Acme"})
	cp.mustCall(opKey, "POST", "/v1/organizations/acme/serviceAccounts?serviceAccountId=ci", map[string]any{})
	cp.mustCall(opKey, "POST", "/v1/organizations/acme/roleBindings?roleBindingId=ci-admin", map[string]any{
		"role": "roles/org.admin", "member": "organizations/acme/serviceAccounts/ci", "resource": "organizations/acme"})
	key, _ := cp.mustCall(opKey, "POST", "/v1/organizations/acme/serviceAccounts/ci/apiKeys?apiKeyId=k1", map[string]any{})["secret"].(string)
	if key == "" {
		t.Fatal("no API key secret")
	}

	ops, access := map[string]string{}, map[string]clusterAccess{}
	for _, c := range []struct {
		id, region string
		protect    bool
	}{{"east", "regions/local-a", true}, {"west", "regions/local-b", false}} {
		op := cp.mustCall(key, "POST", "/v1/organizations/acme/clusters?clusterId="+c.id, map[string]any{
			"region": c.region, "size": map[string]any{"brokers": 1, "bookies": 1}, "deletionProtection": c.protect})
		ops[c.id] = op["name"].(string)
	}
	// The clusters authenticate (the default): clients use the published
	// TLS URLs, the CA the API returns and the control plane's tokens. The
	// operator's are a superuser's; the org.admin account administers the
	// tenants the API creates (below).
	for id, opName := range ops {
		op := cp.waitOp(key, opName, 2*time.Minute)
		resp, _ := op["response"].(map[string]any)
		url, _ := resp["serviceUrl"].(string)
		cl := cp.mustCall(key, "GET", "/v1/organizations/acme/clusters/"+id, nil)
		if cl["state"] != "READY" || cl["serviceUrl"] != url || !strings.HasPrefix(url, "pulsar+ssl://127.0.0.1:") ||
			cl["tlsServiceUrl"] != url || !strings.HasPrefix(cl["adminUrl"].(string), "https://") {
			t.Fatalf("cluster %s: %v (operation response %v)", id, cl, resp)
		}
		roundTrip(t, accessCluster(t, cp.base, cl, opKey), "persistent://public/default/"+id)
		access[id] = accessCluster(t, cp.base, cl, key)
	}

	// A tenant, a namespace and a partitioned topic created through the API
	// are applied to the data plane by the region agent and serve messages.
	west := "/v1/organizations/acme/clusters/west"
	cp.mustCall(key, "POST", west+"/tenants?tenantId=shop", map[string]any{"adminRoles": []string{"shop-admin"}})
	cp.mustCall(key, "POST", west+"/tenants/shop/namespaces?namespaceId=orders", map[string]any{
		"policies": map[string]any{"retention": map[string]any{"timeMinutes": 60, "sizeMb": 10}, "messageTtlSeconds": 3600}})
	cp.mustCall(key, "POST", west+"/tenants/shop/namespaces/orders/topics?topicId=events", map[string]any{"partitions": 3})
	for _, res := range []string{"/tenants/shop", "/tenants/shop/namespaces/orders", "/tenants/shop/namespaces/orders/topics/events"} {
		var last map[string]any
		waitFor(t, res+" to be APPLIED", time.Minute, func() bool {
			code, out := cp.call(key, "GET", west+res, nil)
			last = out
			return code == http.StatusOK && out["state"] == "APPLIED"
		})
		if msg, _ := last["statusMessage"].(string); msg != "" {
			t.Fatalf("%s: %v", res, last)
		}
	}
	// The agent turns the org.admin binding into an admin role of the
	// tenant at its next pass over the bindings.
	opWest := accessCluster(t, cp.base, cp.mustCall(opKey, "GET", west, nil), opKey)
	hc, ciRole := opWest.http(t), issuer.Role("organizations/acme/serviceAccounts/ci")
	waitFor(t, "the ci account to administer tenant shop", time.Minute, func() bool {
		resp, err := hc.Get(opWest.admin("/admin/v2/tenants/shop"))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ti struct{ AdminRoles []string }
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&ti) == nil &&
			slices.Contains(ti.AdminRoles, ciRole)
	})
	roundTrip(t, access["west"], "persistent://shop/orders/events")

	// Deletion protection refuses the delete; turning it off allows it.
	code, out := cp.call(key, "DELETE", "/v1/organizations/acme/clusters/east", nil)
	if code != http.StatusBadRequest || !strings.Contains(out["message"].(string), "deletion_protection") {
		t.Fatalf("delete of a protected cluster: %d %v", code, out)
	}
	cp.mustCall(key, "PATCH", "/v1/organizations/acme/clusters/east", map[string]any{"deletionProtection": false})
	del := cp.mustCall(key, "DELETE", "/v1/organizations/acme/clusters/east", nil)
	cp.waitOp(key, del["name"].(string), time.Minute)
	if code, out := cp.call(key, "GET", "/v1/organizations/acme/clusters/east", nil); code != http.StatusNotFound {
		t.Fatalf("get after delete: %d %v", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "regions", "local-a", "clusters", "acme-east")); !os.IsNotExist(err) {
		t.Fatalf("the deleted cluster's directory: %v", err)
	}

	// Ctrl-C stops `up` and every data-plane process it started.
	pids := recordedPIDs(t, filepath.Join(dir, "regions", "local-b", "clusters", "acme-west", "state.json"))
	if len(pids) != 3 {
		t.Fatalf("west cluster records pids %v, want 3", pids)
	}
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("up did not exit within 60s of SIGINT")
	}
	for _, pid := range pids {
		waitFor(t, "data-plane process "+strconv.Itoa(pid)+" to exit", 10*time.Second, func() bool {
			return !strings.HasPrefix(cmdline(pid), Binary(t)+" ") || zombie(pid)
		})
	}
}

// recordedState is the part of a process provisioner's state.json the
// tests read: the PIDs of a cluster's processes.
type recordedState struct {
	Metadata *struct{ PID int }
	Bookies  []struct{ PID int }
	Brokers  []struct{ PID int }
}

func readRecorded(t *testing.T, stateFile string) recordedState {
	t.Helper()
	raw, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	var st recordedState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// recordedPIDs are the PIDs of a cluster's metadata member, bookies and
// brokers, in that order.
func recordedPIDs(t *testing.T, stateFile string) []int {
	t.Helper()
	st := readRecorded(t, stateFile)
	var pids []int
	if st.Metadata != nil {
		pids = append(pids, st.Metadata.PID)
	}
	for _, b := range st.Bookies {
		pids = append(pids, b.PID)
	}
	for _, b := range st.Brokers {
		pids = append(pids, b.PID)
	}
	return pids
}

func zombie(pid int) bool {
	raw, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := bytes.LastIndexByte(raw, ')')
	return i > 0 && i+2 < len(raw) && raw[i+2] == 'Z'
}

// TestControlPlaneKill9MidProvisioning runs the control plane and an agent
// as separate processes and kills the control plane with SIGKILL while a
// cluster is being provisioned: after a restart the operation completes
// and the cluster serves messages.
func TestControlPlaneKill9MidProvisioning(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	agentDir := t.TempDir()
	killDataPlaneOnCleanup(t, agentDir)
	cpProc, cp, addr, keyFile, opKey := startControlPlaneProcess(t)
	agentProc := Start(t, "agent", "agent", "--region", "r1", "--control-plane", "http://"+addr,
		"--api-key-file", keyFile, "--data-dir", agentDir, "--poll-timeout", "5s")
	interruptOnCleanup(t, agentProc)

	cp.mustCall(opKey, "POST", "/v1/organizations?organizationId=acme", map[string]any{})
	op := cp.mustCall(opKey, "POST", "/v1/organizations/acme/clusters?clusterId=c1", map[string]any{
		"region": "regions/r1", "size": map[string]any{"brokers": 1, "bookies": 1}})
	opName := op["name"].(string)
	// Mid-provisioning: wait until the agent has started processes, then kill.
	waitFor(t, "the agent to start provisioning", 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(agentDir, "clusters", "acme-c1", "state.json"))
		return err == nil
	})
	cpProc.Kill()
	cpProc.Restart()
	cpProc.WaitListening(addr, 30*time.Second)

	done := cp.waitOp(opKey, opName, 2*time.Minute)
	resp, _ := done["response"].(map[string]any)
	if url, _ := resp["serviceUrl"].(string); !strings.HasPrefix(url, "pulsar+ssl://") {
		t.Fatalf("operation after the restart: %v", done)
	}
	roundTrip(t, accessCluster(t, cp.base, resp, opKey), "persistent://public/default/after-cp-kill")
}
