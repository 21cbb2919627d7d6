package process_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-dev/magnetar/e2e"
	"github.com/magnetar-dev/magnetar/regions/provisioner"
	"github.com/magnetar-dev/magnetar/regions/provisioner/process"
	"github.com/magnetar-dev/magnetar/regions/provisioner/provisionertest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newProvisioner starts a provisioner on dir whose processes are stopped
// when the test ends.
func newProvisioner(t *testing.T, dir string) *process.Provisioner {
	t.Helper()
	p, err := process.New(process.Config{DataDir: dir, Binary: e2e.Binary(t), Logger: quiet(),
		CheckInterval: 200 * time.Millisecond, StopGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if err := p.StopAll(context.Background()); err != nil {
			t.Errorf("StopAll: %v", err)
		}
	})
	return p
}

func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	provisionertest.Run(t, func(t *testing.T) provisioner.Provisioner { return newProvisioner(t, t.TempDir()) })
}

func pidOf(t *testing.T, st provisioner.ClusterStatus, role string, index int) int {
	t.Helper()
	for _, ph := range st.Processes {
		if ph.Role == role && ph.Index == index {
			return ph.PID
		}
	}
	t.Fatalf("no %s-%d in %+v", role, index, st)
	return 0
}

func produceConsume(t *testing.T, serviceURL, topic, payload string) {
	t.Helper()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: serviceURL, OperationTimeout: 30 * time.Second,
		Logger: plog.NewLoggerWithSlog(quiet())})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe on %s: %v", serviceURL, err)
	}
	defer cons.Close()
	prod, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer on %s: %v", serviceURL, err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
		t.Fatalf("send: %v", err)
	}
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		cons.Ack(m)
		if string(m.Payload()) == payload {
			return
		}
	}
}

// processGone reports whether pid has exited: reaped here if it is our
// child, gone from /proc, or a zombie.
func processGone(pid int) bool {
	var ws syscall.WaitStatus
	if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid {
		return true
	}
	raw, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil || len(raw) == 0 {
		return true
	}
	// "pid (comm) S ...": a zombie (Z) has exited; its parent, maybe another
	// goroutine's Wait, has not reaped it yet.
	i := bytes.LastIndexByte(raw, ')')
	return i >= 0 && i+2 < len(raw) && raw[i+2] == 'Z'
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestProcessCluster provisions a 1-broker/1-bookie cluster, uses it with
// the Pulsar Go client, kills its broker with SIGKILL (the supervisor
// replaces it), hands it to a new provisioner (which adopts the live
// processes) and deletes it.
func TestProcessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	p1 := newProvisioner(t, dir)
	spec := provisioner.ClusterSpec{Name: "organizations/acme/clusters/dev", Size: provisioner.Size{Brokers: 1, Bookies: 1}, Revision: 1}
	st := provisionertest.WaitReady(t, p1, spec)
	produceConsume(t, st.ServiceURL, "persistent://public/default/first", "hello")
	clusterDir := filepath.Join(dir, "clusters", "acme-dev")
	if _, err := os.Stat(filepath.Join(clusterDir, "state.json")); err != nil {
		t.Fatalf("state file: %v", err)
	}

	// kill -9 the broker: the supervisor starts a new one on the same ports.
	victim := pidOf(t, st, "broker", 0)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var after provisioner.ClusterStatus
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		after, err = p1.Status(t.Context(), spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		if after.State == provisioner.StateReady && pidOf(t, after, "broker", 0) != victim {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker not replaced after kill -9; status %+v", after)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after.ServiceURL != st.ServiceURL {
		t.Fatalf("service URL changed after the restart: %q -> %q", st.ServiceURL, after.ServiceURL)
	}
	produceConsume(t, after.ServiceURL, "persistent://public/default/after-kill", "again")

	// A new provisioner on the same directory adopts the live processes.
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := newProvisioner(t, dir)
	adopted, err := p2.Apply(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for i, ph := range after.Processes {
		if got := adopted.Processes[i]; got.PID != ph.PID || !got.Alive {
			t.Fatalf("%s-%d: pid %d alive %v after adoption, want the running pid %d", ph.Role, ph.Index, got.PID, got.Alive, ph.PID)
		}
	}
	if adopted.State != provisioner.StateReady {
		t.Fatalf("adopted cluster is %s: %s", adopted.State, adopted.Message)
	}

	// Delete stops every process and removes the directory.
	if err := p2.Delete(t.Context(), spec.Name); err != nil {
		t.Fatal(err)
	}
	for _, ph := range adopted.Processes {
		if !processGone(ph.PID) {
			t.Fatalf("%s-%d (pid %d) still running after Delete", ph.Role, ph.Index, ph.PID)
		}
	}
	if _, err := os.Stat(clusterDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cluster directory after Delete: %v", err)
	}
}

// StopAll stops brokers before bookies and bookies before the metadata
// store, so each shuts down cleanly: no broker gives up a shutdown step,
// no bookie fails to end its session, nothing logs a warning or an error.
func TestStopAllStopsInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	p := newProvisioner(t, dir)
	spec := provisioner.ClusterSpec{Name: "organizations/acme/clusters/dev", Size: provisioner.Size{Brokers: 1, Bookies: 1}, Revision: 1}
	st := provisionertest.WaitReady(t, p, spec)
	produceConsume(t, st.ServiceURL, "persistent://public/default/before-stop", "hello")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.StopAll(t.Context()); err != nil {
		t.Fatalf("StopAll: %v", err)
	}
	for _, ph := range st.Processes {
		if !processGone(ph.PID) {
			t.Fatalf("%s-%d (pid %d) still running after StopAll", ph.Role, ph.Index, ph.PID)
		}
	}
	for _, name := range []string{"broker-0.log", "bookie-0.log"} {
		raw, err := os.ReadFile(filepath.Join(dir, "clusters", "acme-dev", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"gave up", "level=WARN", "level=ERROR"} {
			if bytes.Contains(raw, []byte(bad)) {
				t.Errorf("%s says %q after StopAll:\n%s", name, bad, raw)
			}
		}
	}
}

// A cluster's process that dies is reaped at the supervisor's next pass,
// also while the cluster's metadata store is down and cannot be started
// again (the pass then starts none of the other processes).
func TestDeadProcessesReapedWhileMetadataDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	p := newProvisioner(t, dir)
	spec := provisioner.ClusterSpec{Name: "organizations/acme/clusters/dev", Size: provisioner.Size{Brokers: 1, Bookies: 1}, Revision: 1}
	st := provisionertest.WaitReady(t, p, spec)
	// The metadata store cannot start again: a file where its data
	// directory was (the running one keeps the directory it opened).
	mdDir := filepath.Join(dir, "clusters", "acme-dev", "metadata")
	if err := os.Rename(mdDir, mdDir+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mdDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(mdDir)
		os.Rename(mdDir+".aside", mdDir)
	})
	broker, md := pidOf(t, st, "broker", 0), pidOf(t, st, "metadata", 0)
	for _, pid := range []int{md, broker} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range []int{md, broker} {
		for {
			if _, err := os.Stat("/proc/" + itoa(pid)); errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pid %d killed, still not reaped (%s)", pid, procState(pid))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// procState is the state letter of pid in /proc ("Z" for a zombie).
func procState(pid int) string {
	raw, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if i := bytes.LastIndexByte(raw, ')'); err == nil && i >= 0 && i+2 < len(raw) {
		return string(raw[i+2])
	}
	return "gone"
}
