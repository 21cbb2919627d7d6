package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/functions/pyinstance/pyinstancetest"
)

// TestFunctionFromCLIToInvoice follows a function through the managed
// service as a tenant meets it: a control-plane process and a region agent
// process provision a cluster; `magnetar function create` (the CLI binary)
// deploys a Python function from an http:// package URL; it processes a
// message on the cluster (with authentication on, the cluster's default);
// the seconds its instance runs reach the control plane as
// function_instance_seconds usage, and the month's invoice prices them.
func TestFunctionFromCLIToInvoice(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	pyinstancetest.Require(t)
	t.Parallel()
	agentDir := t.TempDir()
	killDataPlaneOnCleanup(t, agentDir)
	_, cp, addr, keyFile, opKey := startControlPlaneProcess(t)
	cp.mustCall(opKey, "POST", "/v1/organizations?organizationId=fnco", map[string]any{})
	agent := Start(t, "agent", "agent", "--region", "r1", "--control-plane", "http://"+addr, "--api-key-file", keyFile,
		"--data-dir", agentDir, "--poll-timeout", "5s", "--metering-interval", "1s", "--reconcile-interval", "1s")
	interruptOnCleanup(t, agent)
	// A price per instance-second, so a short run has an amount.
	cp.mustCall(opKey, "POST", "/v1/priceBooks?priceBookId=fn-e2e", map[string]any{
		"currency": "USD", "effectiveTime": "2026-01-01T00:00:00Z",
		"prices": []map[string]any{{"meter": "function_instance_seconds", "unit": "instance-second",
			"tiers": []map[string]any{{"unitPrice": "0.01"}}}},
	})

	runCLI(t, addr, keyFile, "cluster", "create", "fnco", "c1", "--region", "r1", "--brokers", "1", "--bookies", "1")
	runCLI(t, addr, keyFile, "tenant", "create", "fnco/c1/shop")
	runCLI(t, addr, keyFile, "namespace", "create", "fnco/c1/shop/orders")
	pkgs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/excl.py" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(exclamationPy))
	}))
	defer pkgs.Close()
	in, out := "persistent://shop/orders/in", "persistent://shop/orders/out"
	runCLI(t, addr, keyFile, "function", "create", "fnco/c1/shop/orders/excl", "--runtime", "PYTHON",
		"--class-name", "excl.ExclamationFunction", "--inputs", in, "--output", out,
		"--package-url", pkgs.URL+"/excl.py", "--subscription-position", "EARLIEST", "--ram", "128Mi")
	created := time.Now()

	c1 := accessCluster(t, cp.base, cp.mustCall(opKey, "GET", "/v1/organizations/fnco/clusters/c1", nil), opKey)
	hc := c1.http(t)
	waitFor(t, "the function's instance running on the cluster", 120*time.Second, func() bool {
		var st fnStatus
		resp, err := hc.Get(c1.admin("/admin/v3/functions/shop/orders/excl/status"))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&st) == nil && st.NumRunning == 1
	})
	t.Logf("function running %v after the CLI's create", time.Since(created).Round(time.Millisecond))
	if got := runCLI(t, addr, keyFile, "function", "get", "fnco/c1/shop/orders/excl"); !strings.Contains(got, "excl") {
		t.Fatalf("function get: %s", got)
	}

	cl := c1.client(t)
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: out, SubscriptionName: "verify", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: in})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Payload()) != "hello!" {
		t.Fatalf("output %q, want %q", msg.Payload(), "hello!")
	}

	// The worker meters every 10 s, the agent reports every second.
	var secs int64
	waitFor(t, "function_instance_seconds usage at the control plane", 90*time.Second, func() bool {
		got, ok := usageTotals(cp, opKey, "fnco")
		secs = got["function_instance_seconds"]
		return ok && secs >= 5
	})
	t.Logf("function_instance_seconds: %d", secs)
	month := time.Now().UTC().Format("2006-01")
	var line map[string]any
	waitFor(t, "an invoice line for function_instance_seconds", 30*time.Second, func() bool {
		code, inv := cp.call(opKey, "GET", "/v1/organizations/fnco/invoices/"+month, nil)
		if code != http.StatusOK {
			return false
		}
		lines, _ := inv["lines"].([]any)
		for _, l := range lines {
			if lm, _ := l.(map[string]any); lm["meter"] == "function_instance_seconds" {
				line = lm
				return true
			}
		}
		return false
	})
	qty, _ := strconv.ParseFloat(fmt.Sprint(line["quantity"]), 64)
	amount, _ := strconv.ParseFloat(fmt.Sprint(line["amount"]), 64)
	if qty < 5 || amount < 0.05 || line["unitPrice"] != "0.01" {
		t.Fatalf("invoice line %v: want at least 5 instance-seconds at 0.01", line)
	}
	t.Logf("invoice line: %v", line)
}
