package kubenode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/internal/pki"
)

// Identities the apiserver knows by bearer token (--token-auth-file), and
// the name its client certificate carries when it calls kubelet.
const (
	adminUser             = "kubenode-admin"
	controllerManagerUser = "system:kube-controller-manager"
	schedulerUser         = "system:kube-scheduler"
	apiserverKubeletUser  = "kube-apiserver-kubelet-client"
)

// certValidity is how long the node's certificates are valid: longer than
// any test.
const certValidity = 7 * 24 * time.Hour

// layout is where the node's files live under Dir.
type layout struct {
	dir string
}

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.dir}, elem...)...)
}

func (l layout) logs() string       { return l.path("logs") }
func (l layout) pki() string        { return l.path("pki") }
func (l layout) caCert() string     { return l.path("pki", "ca.pem") }
func (l layout) etcdData() string   { return l.path("etcd") }
func (l layout) containerd() string { return l.path("containerd") }
func (l layout) containerdSock() string {
	return l.path("containerd", "containerd.sock")
}
func (l layout) cniConfDir() string { return l.path("cni", "net.d") }
func (l layout) kubeletDir() string { return l.path("kubelet") }
func (l layout) images() string     { return l.path("images") }

// subnet is the pod bridge's addresses, derived from a /24.
type subnet struct {
	prefix     netip.Prefix
	host       netip.Addr // .1, on the bridge: the node's address
	rangeStart netip.Addr // .2
	rangeEnd   netip.Addr // .127
	services   netip.Prefix
	kubeSvc    netip.Addr // first service address: the kubernetes Service
}

// parseSubnet checks that s is an IPv4 /24 and splits it.
func parseSubnet(s string) (subnet, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return subnet{}, fmt.Errorf("kubenode: subnet %q: %w", s, err)
	}
	if !p.Addr().Is4() || p.Bits() != 24 || p.Masked() != p {
		return subnet{}, fmt.Errorf("kubenode: subnet %q is not an IPv4 /24 network", s)
	}
	b := p.Addr().As4()
	at := func(last byte) netip.Addr { return netip.AddrFrom4([4]byte{b[0], b[1], b[2], last}) }
	return subnet{
		prefix:     p,
		host:       at(1),
		rangeStart: at(2),
		rangeEnd:   at(127),
		services:   netip.PrefixFrom(at(128), 25),
		kubeSvc:    at(129),
	}, nil
}

// newToken returns a random bearer token.
func newToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("kubenode: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeFile writes b to path, creating its directory.
func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	return nil
}

// writePKI writes the CA, the apiserver's serving certificate (for
// loopback, the bridge address and the kubernetes Service's names), its
// client certificate towards kubelet, and the service-account signing key
// pair, all under l.pki().
func writePKI(l layout, sn subnet) error {
	ca, err := pki.Create("kubenode CA", certValidity)
	if err != nil {
		return err
	}
	if err := writeFile(l.caCert(), ca.CertPEM, 0o644); err != nil {
		return err
	}
	serving, err := ca.Issue("kube-apiserver", []string{
		"127.0.0.1", "localhost", sn.host.String(), sn.kubeSvc.String(),
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}, certValidity)
	if err != nil {
		return err
	}
	if err := pki.WriteLeaf(serving, l.path("pki", "apiserver.pem"), l.path("pki", "apiserver-key.pem")); err != nil {
		return err
	}
	kc, err := ca.Issue(apiserverKubeletUser, nil, certValidity)
	if err != nil {
		return err
	}
	if err := pki.WriteLeaf(kc, l.path("pki", "apiserver-kubelet-client.pem"), l.path("pki", "apiserver-kubelet-client-key.pem")); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	if err := writeFile(l.path("pki", "sa-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return err
	}
	return writeFile(l.path("pki", "sa.pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// identity is one user of the token file.
type identity struct {
	user   string
	groups []string
	token  string
}

// tokenFile is the apiserver's --token-auth-file: token,user,uid,"groups".
func tokenFile(ids []identity) []byte {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s,%s,%s", id.token, id.user, id.user)
		if len(id.groups) > 0 {
			fmt.Fprintf(&b, ",%q", strings.Join(id.groups, ","))
		}
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// kubeconfig is a kubeconfig that reaches server as the token's user,
// trusting caFile.
func kubeconfig(server, caFile, user, token string) []byte {
	// JSON is YAML: the encoder quotes every value correctly.
	b, _ := json.MarshalIndent(map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{
			"name":    "kubenode",
			"cluster": map[string]any{"server": server, "certificate-authority": caFile},
		}},
		"users": []any{map[string]any{
			"name": user,
			"user": map[string]any{"token": token},
		}},
		"contexts": []any{map[string]any{
			"name":    "kubenode",
			"context": map[string]any{"cluster": "kubenode", "user": user},
		}},
		"current-context": "kubenode",
	}, "", "  ")
	return append(b, '\n')
}

// containerdConfig is containerd 1.6's config.toml (version 2): every path
// under the node's directory, the CRI plugin with kubenode's pause image
// as the sandbox image, restrict_oom_score_adj (root here lacks
// CAP_SYS_RESOURCE, so raising a sandbox's oom_score_adj fails), network
// namespaces under the state directory, CNI from Debian's plugins and the
// node's conflist, and runc with cgroupfs.
func containerdConfig(l layout, sandboxImage string) []byte {
	d := l.containerd()
	return []byte(fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
`, filepath.Join(d, "root"), filepath.Join(d, "state"), l.containerdSock(), filepath.Join(d, "opt"),
		sandboxImage, CNIDir, l.cniConfDir(), filepath.Join(d, "runc")))
}

// cniNetwork is the name of the node's CNI network.
const cniNetwork = "kubenode"

// cniConfig is the pod network: the bridge plugin on the node's bridge
// (which Start creates with the host address, so the plugin neither
// assigns it nor turns on IP forwarding: isGateway false), no masquerade,
// host-local addresses .2-.127 with no routes (pods reach the subnet
// only), its state under the node's directory. containerd adds the
// loopback interface itself.
func cniConfig(l layout, bridge string, sn subnet) []byte {
	b, _ := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNetwork,
		"plugins": []any{map[string]any{
			"type":      "bridge",
			"bridge":    bridge,
			"isGateway": false,
			"ipMasq":    false,
			"ipam": map[string]any{
				"type": "host-local",
				"ranges": [][]map[string]string{{{
					"subnet":     sn.prefix.String(),
					"rangeStart": sn.rangeStart.String(),
					"rangeEnd":   sn.rangeEnd.String(),
				}}},
				"dataDir": l.path("cni", "ipam"),
			},
		}},
	}, "", "  ")
	return append(b, '\n')
}

// kubeletConfig is the KubeletConfiguration: cgroupfs (no systemd here),
// failCgroupV1 false (the machine has cgroup v1), serving on the bridge
// address with webhook authentication and authorization, pod logs under
// the node's directory, eviction and image garbage collection thresholds
// out of the way (the node's disk is shared with everything else, and
// imported images cannot be pulled again).
func kubeletConfig(l layout, sn subnet, port, healthzPort int) []byte {
	b, _ := json.MarshalIndent(map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"cgroupDriver":             "cgroupfs",
		"failCgroupV1":             false,
		"containerRuntimeEndpoint": "unix://" + l.containerdSock(),
		"address":                  sn.host.String(),
		"port":                     port,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              healthzPort,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": l.caCert()},
		},
		"authorization": map[string]any{"mode": "Webhook"},
		"podLogsDir":    l.path("pod-logs"),
		"failSwapOn":    false,
		"evictionHard": map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
			"nodefs.inodesFree": "1%",
		},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"serializeImagePulls":         false,
		"nodeStatusUpdateFrequency":   "2s",
		"maxPods":                     100,
	}, "", "  ")
	return append(b, '\n')
}
