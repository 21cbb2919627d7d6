package kubenode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Version is the Kubernetes release setup.sh builds.
const Version = "v1.37.2"

// RequireEnv set to 1 (as .ci/run does once setup.sh ran) makes a missing
// binary a test failure instead of a skip.
const RequireEnv = "MAGNETAR_REQUIRE_KUBE"

// HomeEnv overrides the directory setup.sh builds into.
const HomeEnv = "MAGNETAR_KUBE_HOME"

// CNIDir is where Debian's containernetworking-plugins puts the plugins.
const CNIDir = "/usr/lib/cni"

// kubeBinaries are the commands setup.sh builds into its bin directory.
var kubeBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"}

// hostBinaries are the commands Start runs from PATH (Debian's packages).
var hostBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "iptables-save", "iptables-restore", "ip"}

// cniPlugins are the CNI plugins the node's network uses.
var cniPlugins = []string{"bridge", "host-local", "loopback"}

// DefaultHome returns the directory setup.sh builds into by default:
// $MAGNETAR_KUBE_HOME, else ~/.cache/magnetar/kube-v1.37.2.
func DefaultHome() string {
	if h := os.Getenv(HomeEnv); h != "" {
		return h
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "magnetar", "kube-"+Version)
}

// Locate returns the directory holding the Kubernetes binaries (binDir,
// or DefaultHome()/bin when empty) after checking that everything a node
// needs is there: those binaries, Debian's containerd, runc, iptables and
// ip on PATH, the CNI plugins in CNIDir, and root.
func Locate(binDir string) (string, error) {
	if binDir == "" {
		binDir = filepath.Join(DefaultHome(), "bin")
	}
	var missing []string
	for _, b := range kubeBinaries {
		if st, err := os.Stat(filepath.Join(binDir, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Join(binDir, b))
		}
	}
	for _, b := range hostBinaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b+" (PATH)")
		}
	}
	for _, p := range cniPlugins {
		if _, err := os.Stat(filepath.Join(CNIDir, p)); err != nil {
			missing = append(missing, filepath.Join(CNIDir, p))
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("kubenode: missing %s (run e2e/kubenode/setup.sh)", strings.Join(missing, ", "))
	}
	if os.Geteuid() != 0 {
		return "", errors.New("kubenode: a node needs root (kubelet, containerd, network namespaces)")
	}
	return binDir, nil
}

// Require returns the binaries' directory, or skips t when Locate fails,
// or fails t there under RequireEnv=1. It also skips under -short.
func Require(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Kubernetes node")
	}
	dir, err := Locate("")
	if err == nil {
		return dir
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%v (%s=1)", err, RequireEnv)
	}
	t.Skip(err)
	return ""
}
