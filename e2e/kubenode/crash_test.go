package kubenode

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// crashHelperEnv makes TestCrashHelper run: it is set only in the child
// process TestRecoverAfterCrash starts.
const crashHelperEnv = "KUBENODE_CRASH_HELPER"

// TestRecoverAfterCrash kills a test process (SIGKILL) while its node
// runs a pod, then checks that the host record it left is enough to put
// the host back: the node's processes die with their parent, but the
// containerd shim and the pod's processes, its mounts, network namespace,
// cgroups, the bridge, the sysctls and the iptables chains remain until
// the next node's Start (here recoverHost alone) restores them.
func TestRecoverAfterCrash(t *testing.T) {
	Require(t)
	before := hostFacts(t)

	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHelper$", "-test.v")
	child.Env = append(os.Environ(), crashHelperEnv+"=1")
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.HasPrefix(sc.Text(), "KUBENODE READY") {
				ready <- ""
				return
			}
		}
		ready <- strings.Join(lines, "\n")
	}()
	select {
	case failed := <-ready:
		if failed != "" {
			_ = child.Wait()
			t.Fatalf("the child exited before its node was ready:\n%s", failed)
		}
	case <-ctx.Done():
		t.Fatal("the child's node did not come up")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	st, err := loadState()
	if err != nil || st == nil {
		t.Fatalf("no host record after the crash: %v", err)
	}
	if _, err := os.Stat("/sys/class/net/" + st.Bridge); err != nil {
		t.Fatalf("the crashed node's bridge is already gone: %v", err)
	}
	lock, err := acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if err := recoverHost(slog.New(slog.NewTextHandler(testWriter{t}, nil))); err != nil {
		t.Fatal(err)
	}
	if after := hostFacts(t); !reflect.DeepEqual(before, after) {
		t.Errorf("the host after recovery differs:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Stat(st.Dir); !os.IsNotExist(err) {
		t.Errorf("the crashed node's directory %s: %v", st.Dir, err)
	}
}

// TestCrashHelper runs only in TestRecoverAfterCrash's child: it starts a
// node, runs a pod of the pause image, prints a line and waits to be
// killed.
func TestCrashHelper(t *testing.T) {
	if os.Getenv(crashHelperEnv) != "1" {
		t.Skip("runs as TestRecoverAfterCrash's child")
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	n, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	pods := n.Client().CoreV1().Pods(metav1.NamespaceDefault)
	if _, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: PauseImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.poll(ctx, "pod sleeper running", 200*time.Millisecond, func() (bool, error) {
		p, err := pods.Get(ctx, "sleeper", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s", p.Status.Phase)
	}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("KUBENODE READY")
	<-ctx.Done()
}
