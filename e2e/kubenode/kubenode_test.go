package kubenode

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/magnetar-dev/magnetar/internal/ociimage"
)

// magnetarImage is the image TestMagnetarPod builds and imports.
const magnetarImage = "magnetar.local/magnetar:kubenode-test"

// TestMagnetarPod starts the node, runs `magnetar standalone` in a pod
// from an image built here, waits for its readiness probe (the broker's
// health endpoint), reaches the broker's admin API from the host by the
// pod's IP, deletes the pod and stops the node; then the host must be as
// it was before.
func TestMagnetarPod(t *testing.T) {
	Require(t)
	before := hostFacts(t)
	// Registered before Run, so it runs after the node's Stop.
	t.Cleanup(func() {
		after := hostFacts(t)
		if !reflect.DeepEqual(before, after) {
			t.Errorf("the host changed:\nbefore %v\nafter  %v", before, after)
		}
	})

	// The image first: building magnetar is the slow part, and the node
	// need not run meanwhile.
	dir := t.TempDir()
	t0 := time.Now()
	bin := filepath.Join(dir, "magnetar")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/magnetar-dev/magnetar/cmd/magnetar")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building magnetar with CGO_ENABLED=0: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "magnetar.tar")
	if _, err := ociimage.Write(archive, ociimage.Spec{
		Ref:          magnetarImage,
		Files:        []ociimage.File{{Path: "/magnetar", Source: bin}},
		Dirs:         []string{"/data"},
		Entrypoint:   []string{"/magnetar"},
		WorkingDir:   "/data",
		ExposedPorts: []string{"6650/tcp", "8080/tcp"},
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("magnetar image built in %v", time.Since(t0).Round(time.Millisecond))

	n := Run(t, Config{})
	t.Logf("node: apiserver ready after %v, node Ready after %v, Start returned after %v",
		n.Timings.APIServerReady.Round(time.Millisecond), n.Timings.NodeReady.Round(time.Millisecond), n.Timings.Total.Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t1 := time.Now()
	if err := n.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("image imported in %v", time.Since(t1).Round(time.Millisecond))

	pods := n.Client().CoreV1().Pods(metav1.NamespaceDefault)
	grace := int64(10)
	no := false
	t2 := time.Now()
	_, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "standalone", Labels: map[string]string{"app": "magnetar"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Containers: []corev1.Container{{
				Name:            "magnetar",
				Image:           magnetarImage,
				ImagePullPolicy: corev1.PullNever,
				Args: []string{"standalone",
					"--data-dir", "/data",
					"--broker-addr", "0.0.0.0:6650",
					"--http-addr", "0.0.0.0:8080",
					"--advertised-address", "$(POD_IP):6650",
					"--functions-worker=false",
				},
				Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"},
				}}},
				Ports: []corev1.ContainerPort{
					{Name: "pulsar", ContainerPort: 6650},
					{Name: "http", ContainerPort: 8080},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/admin/v2/brokers/health", Port: intstr.FromString("http"),
					}},
					PeriodSeconds:    1,
					TimeoutSeconds:   2,
					FailureThreshold: 3,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var pod *corev1.Pod
	if err := n.poll(ctx, "pod standalone Ready", 200*time.Millisecond, func() (bool, error) {
		pod, err = pods.Get(ctx, "standalone", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s", pod.Status.Phase)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, fmt.Errorf("pod %s, containers %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
	}); err != nil {
		t.Fatalf("%v\n%s", err, podLogs(ctx, n, "standalone"))
	}
	t.Logf("pod Ready %v after its creation, IP %s", time.Since(t2).Round(time.Millisecond), pod.Status.PodIP)

	// From the host, over the bridge, by the pod's address.
	url := "http://" + pod.Status.PodIP + ":8080/admin/v2/clusters"
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "standalone") {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	t.Logf("GET %s: %s", url, body)

	// The container's log through the apiserver, which calls kubelet with
	// its client certificate (kubelet's webhook authorization).
	logs, err := n.Client().CoreV1().Pods(metav1.NamespaceDefault).GetLogs("standalone", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || len(logs) == 0 {
		t.Errorf("pod log through the apiserver: %v (%d bytes)", err, len(logs))
	}

	t3 := time.Now()
	if err := pods.Delete(ctx, "standalone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.poll(ctx, "pod standalone deleted", 200*time.Millisecond, func() (bool, error) {
		_, err := pods.Get(ctx, "standalone", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod gone %v after its deletion", time.Since(t3).Round(time.Millisecond))
}

// podLogs returns a pod's container log through the apiserver (which asks
// kubelet), for a failure's report.
func podLogs(ctx context.Context, n *Node, name string) string {
	b, err := n.Client().CoreV1().Pods(metav1.NamespaceDefault).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "logs: " + err.Error()
	}
	return string(b)
}

// hostFacts is what a node must leave as it found it: the sysctls kubelet
// touches, the iptables chains (and the whole nf_tables rule set where nft
// is installed), the network interfaces, the top-level
// cgroups of each hierarchy and the host directories kubelet and
// containerd use.
func hostFacts(t *testing.T) map[string]string {
	t.Helper()
	f := map[string]string{}
	for _, k := range sysctls {
		b, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		f["sysctl "+k] = strings.TrimSpace(string(b))
	}
	for _, tool := range iptablesTools() {
		out, err := exec.Command(tool + "-save").Output()
		if err != nil {
			t.Fatalf("%s-save: %v", tool, err)
		}
		for table, rs := range parseSave(out) {
			f[tool+" "+table] = fmt.Sprint(rs.chains, rs.rules)
		}
	}
	if _, err := exec.LookPath("nft"); err == nil {
		out, err := exec.Command("nft", "list", "ruleset").Output()
		if err != nil {
			t.Fatalf("nft list ruleset: %v", err)
		}
		f["nft"] = string(out)
	}
	links, _ := os.ReadDir("/sys/class/net")
	var names []string
	for _, l := range links {
		names = append(names, l.Name())
	}
	f["links"] = strings.Join(names, " ")
	hier, _ := os.ReadDir(cgroupRoot)
	for _, h := range hier {
		ents, _ := os.ReadDir(filepath.Join(cgroupRoot, h.Name()))
		var dirs []string
		for _, e := range ents {
			if e.IsDir() {
				dirs = append(dirs, e.Name())
			}
		}
		f["cgroup "+h.Name()] = strings.Join(dirs, " ")
	}
	for _, p := range append(hostPaths, "/var/lib/kubelet", "/var/lib/containerd", "/etc/cni", "/opt/cni", "/run/netns", "/var/run/netns") {
		_, err := os.Lstat(p)
		f["path "+p] = fmt.Sprint(err == nil)
	}
	return f
}
