package kubenode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/magnetar-dev/magnetar/internal/dirlock"
	"github.com/magnetar-dev/magnetar/internal/freeport"
	"github.com/magnetar-dev/magnetar/internal/ociimage"
)

// Defaults of Config.
const (
	DefaultNodeName = "magnetar-kubenode"
	DefaultSubnet   = "10.213.0.0/24"
	DefaultBridge   = "mgkube0"
)

// PauseImage is the sandbox image containerd is configured with; Start
// builds and imports it (package pause beside this file).
const PauseImage = "magnetar.local/kubenode-pause:1"

// Config configures a node. The zero value is usable.
type Config struct {
	// Dir holds everything the node writes; it is created if missing, and
	// must be empty if it exists. Default: a new directory under
	// os.TempDir(), removed by Stop. A short path keeps unix socket paths
	// under their 108-byte limit.
	Dir string
	// BinDir holds the Kubernetes binaries (default: Locate's).
	BinDir string
	// NodeName is the Node's name (default DefaultNodeName).
	NodeName string
	// Subnet is the pod bridge's IPv4 /24 (default DefaultSubnet): the
	// host takes .1, pods .2-.127, Service cluster IPs .128/25.
	Subnet string
	// Bridge is the bridge's interface name (default DefaultBridge).
	Bridge string
	// Log receives progress lines (default: discarded).
	Log *slog.Logger
}

// Node is a running single-node cluster.
type Node struct {
	cfg    Config
	l      layout
	sn     subnet
	lock   *dirlock.Lock
	host   *hostState
	server string
	admin  string // admin token

	restCfg *rest.Config
	client  kubernetes.Interface

	mu    sync.Mutex
	procs map[string]*proc // by name
	order []string         // start order

	// Timings of Start, for reports.
	Timings Timings
}

// Timings are the durations of Start's phases.
type Timings struct {
	APIServerReady time.Duration // from Start to /readyz answering ok
	NodeReady      time.Duration // from Start to the Node Ready
	Total          time.Duration // from Start to its return
}

// Start brings a node up and returns once it is Ready and the default
// namespace's ServiceAccount exists (pods are refused before). On error
// everything started is torn down again. ctx bounds the whole start,
// waiting for another process's node to stop included.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	t0 := time.Now()
	if cfg.BinDir, err = Locate(cfg.BinDir); err != nil {
		return nil, err
	}
	if cfg.NodeName == "" {
		cfg.NodeName = DefaultNodeName
	}
	if cfg.Subnet == "" {
		cfg.Subnet = DefaultSubnet
	}
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	sn, err := parseSubnet(cfg.Subnet)
	if err != nil {
		return nil, err
	}
	if len(cfg.Bridge) > 15 {
		return nil, fmt.Errorf("kubenode: bridge name %q longer than 15 bytes", cfg.Bridge)
	}

	lock, err := acquire(ctx)
	if err != nil {
		return nil, err
	}
	n = &Node{cfg: cfg, sn: sn, lock: lock, procs: map[string]*proc{}}
	defer func() {
		if err != nil {
			if serr := n.Stop(context.Background()); serr != nil {
				err = errors.Join(err, serr)
			}
		}
	}()
	if err := recoverHost(cfg.Log); err != nil {
		return n, err
	}

	st := &hostState{Bridge: cfg.Bridge}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "kubenode-"); err != nil {
			return n, fmt.Errorf("kubenode: %w", err)
		}
		st.RemoveDir = true
	} else {
		if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
			return n, fmt.Errorf("kubenode: %w", err)
		}
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return n, fmt.Errorf("kubenode: %w", err)
		}
		if ents, _ := os.ReadDir(cfg.Dir); len(ents) > 0 {
			return n, fmt.Errorf("kubenode: %s is not empty", cfg.Dir)
		}
	}
	n.cfg = cfg
	n.l = layout{dir: cfg.Dir}
	st.Dir = cfg.Dir
	if _, err := os.Stat(filepath.Join("/sys/class/net", cfg.Bridge)); err == nil {
		return n, fmt.Errorf("kubenode: network interface %s exists already", cfg.Bridge)
	}
	if err := snapshotHost(st); err != nil {
		return n, err
	}
	n.host = st
	if err := saveState(st); err != nil {
		return n, err
	}

	if err := n.start(ctx, t0); err != nil {
		return n, err
	}
	n.Timings.Total = time.Since(t0)
	cfg.Log.Info("kubenode ready", "dir", cfg.Dir, "apiserver", n.server,
		"apiserver_ready", n.Timings.APIServerReady, "node_ready", n.Timings.NodeReady, "total", n.Timings.Total)
	return n, nil
}

// acquire takes the machine's node lock, waiting while another process
// holds it.
func acquire(ctx context.Context) (*dirlock.Lock, error) {
	for {
		l, err := dirlock.Acquire(stateDir)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, dirlock.ErrInUse) {
			return nil, fmt.Errorf("kubenode: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kubenode: waiting for another node on this machine to stop: %w (%v)", ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// recoverHost restores the host from the record of a node whose process
// died before its Stop.
func recoverHost(log *slog.Logger) error {
	st, err := loadState()
	if err != nil || st == nil {
		return err
	}
	log.Warn("kubenode: restoring the host after a node that did not stop", "pid", st.PID, "dir", st.Dir)
	if err := restoreHost(st, log); err != nil {
		return fmt.Errorf("kubenode: restoring the host after the node of pid %d: %w", st.PID, err)
	}
	return os.Remove(stateFile)
}

// start runs the processes in order.
func (n *Node) start(ctx context.Context, t0 time.Time) error {
	l, sn, cfg := n.l, n.sn, n.cfg
	for _, d := range []string{l.logs(), l.images(), l.cniConfDir(), l.kubeletDir(), l.containerd()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("kubenode: %w", err)
		}
	}
	if err := writePKI(l, sn); err != nil {
		return err
	}
	ids := map[string]*identity{
		"admin":              {user: adminUser, groups: []string{"system:masters"}},
		"kubelet":            {user: "system:node:" + cfg.NodeName, groups: []string{"system:nodes"}},
		"controller-manager": {user: controllerManagerUser},
		"scheduler":          {user: schedulerUser},
	}
	var list []identity
	for _, name := range []string{"admin", "kubelet", "controller-manager", "scheduler"} {
		tok, err := newToken()
		if err != nil {
			return err
		}
		ids[name].token = tok
		list = append(list, *ids[name])
	}
	if err := writeFile(l.path("pki", "tokens.csv"), tokenFile(list), 0o600); err != nil {
		return err
	}
	ports := map[string]int{}
	for _, p := range []string{"etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kubelet", "kubelet-healthz"} {
		port, err := freeport.Port()
		if err != nil {
			return err
		}
		ports[p] = port
	}
	n.server = "https://127.0.0.1:" + strconv.Itoa(ports["apiserver"])
	n.admin = ids["admin"].token
	for name, id := range ids {
		if err := writeFile(l.path(name+".kubeconfig"), kubeconfig(n.server, l.caCert(), id.user, id.token), 0o600); err != nil {
			return err
		}
	}
	if err := writeFile(l.path("containerd", "config.toml"), containerdConfig(l, PauseImage), 0o644); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(l.cniConfDir(), "10-kubenode.conflist"), cniConfig(l, cfg.Bridge, sn), 0o644); err != nil {
		return err
	}
	if err := writeFile(l.path("kubelet.json"), kubeletConfig(l, sn, ports["kubelet"], ports["kubelet-healthz"]), 0o644); err != nil {
		return err
	}
	if err := createBridge(cfg.Bridge, sn.host.String()+"/24"); err != nil {
		return err
	}

	bin := func(c string) string { return filepath.Join(cfg.BinDir, c) }
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports["etcd-client"])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports["etcd-peer"])
	if err := n.run("etcd", bin("etcd"),
		"--name", "kubenode",
		"--data-dir", l.etcdData(),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "kubenode="+peerURL,
		"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return err
	}
	// containerd does not depend on the control plane: it starts now and
	// the pause image is built and imported while the apiserver comes up.
	if err := n.run("containerd", "containerd", "--config", l.path("containerd", "config.toml")); err != nil {
		return err
	}
	pauseDone := make(chan error, 1)
	go func() { pauseDone <- n.importPause(ctx) }()

	if err := n.waitHTTP(ctx, "etcd", etcdURL+"/health", "", nil); err != nil {
		return err
	}
	if err := n.run("kube-apiserver", bin("kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports["apiserver"]),
		"--cert-dir", l.path("pki", "apiserver"),
		"--tls-cert-file", l.path("pki", "apiserver.pem"), "--tls-private-key-file", l.path("pki", "apiserver-key.pem"),
		"--client-ca-file", l.caCert(),
		"--token-auth-file", l.path("pki", "tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", l.path("pki", "sa.pem"),
		"--service-account-signing-key-file", l.path("pki", "sa-key.pem"),
		"--service-cluster-ip-range", sn.services.String(),
		"--endpoint-reconciler-type", "none",
		"--kubelet-client-certificate", l.path("pki", "apiserver-kubelet-client.pem"),
		"--kubelet-client-key", l.path("pki", "apiserver-kubelet-client-key.pem"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--allow-privileged",
		"--profiling=false"); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(l.caCert())
	if err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	pool.AppendCertsFromPEM(caPEM)
	if err := n.waitHTTP(ctx, "kube-apiserver", n.server+"/readyz", n.admin, pool); err != nil {
		return err
	}
	n.Timings.APIServerReady = time.Since(t0)
	cfg.Log.Info("kubenode: apiserver ready", "after", n.Timings.APIServerReady)

	n.restCfg = &rest.Config{
		Host:            n.server,
		BearerToken:     n.admin,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		QPS:             50,
		Burst:           100,
	}
	if n.client, err = kubernetes.NewForConfig(n.restCfg); err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	// kubelet authorizes the apiserver's calls (logs, exec) by asking the
	// apiserver about the name in its client certificate.
	if _, err := n.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubenode:apiserver-kubelet-client"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: apiserverKubeletUser}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubenode: %w", err)
	}

	if err := n.run("kube-controller-manager", bin("kube-controller-manager"),
		"--kubeconfig", l.path("controller-manager.kubeconfig"),
		"--authentication-kubeconfig", l.path("controller-manager.kubeconfig"),
		"--authorization-kubeconfig", l.path("controller-manager.kubeconfig"),
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports["controller-manager"]),
		"--cert-dir", l.path("pki", "controller-manager"),
		"--leader-elect=false",
		"--use-service-account-credentials",
		"--service-account-private-key-file", l.path("pki", "sa-key.pem"),
		"--root-ca-file", l.caCert(),
		"--cluster-name", "kubenode",
		"--profiling=false"); err != nil {
		return err
	}
	if err := n.run("kube-scheduler", bin("kube-scheduler"),
		"--kubeconfig", l.path("scheduler.kubeconfig"),
		"--authentication-kubeconfig", l.path("scheduler.kubeconfig"),
		"--authorization-kubeconfig", l.path("scheduler.kubeconfig"),
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports["scheduler"]),
		"--cert-dir", l.path("pki", "scheduler"),
		"--leader-elect=false",
		"--profiling=false"); err != nil {
		return err
	}

	select {
	case err := <-pauseDone:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return fmt.Errorf("kubenode: importing the pause image: %w", ctx.Err())
	}
	if err := n.run("kubelet", bin("kubelet"),
		"--config", l.path("kubelet.json"),
		"--kubeconfig", l.path("kubelet.kubeconfig"),
		"--root-dir", l.kubeletDir(),
		"--cert-dir", filepath.Join(l.kubeletDir(), "pki"),
		"--hostname-override", cfg.NodeName,
		"--node-ip", sn.host.String()); err != nil {
		return err
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	n.Timings.NodeReady = time.Since(t0)
	cfg.Log.Info("kubenode: node ready", "after", n.Timings.NodeReady)
	return n.WaitServiceAccount(ctx, metav1.NamespaceDefault)
}

// run starts one of the node's processes.
func (n *Node) run(name, bin string, args ...string) error {
	p, err := startProc(name, filepath.Join(n.l.logs(), name+".log"), nil, bin, args...)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.procs[name] = p
	n.order = append(n.order, name)
	n.mu.Unlock()
	n.cfg.Log.Info("kubenode: started", "process", name, "pid", p.cmd.Process.Pid)
	return nil
}

// exitedErr returns an error naming any process of the node that exited.
func (n *Node) exitedErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, name := range n.order {
		if p := n.procs[name]; p.exited() {
			return fmt.Errorf("kubenode: %s exited: %v\n%s", name, p.err, p.tail(4096))
		}
	}
	return nil
}

// poll calls f every interval until it returns true or an error, a
// process of the node exits, or ctx ends.
func (n *Node) poll(ctx context.Context, what string, interval time.Duration, f func() (bool, error)) error {
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if err := n.exitedErr(); err != nil {
			return fmt.Errorf("kubenode: waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubenode: waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// waitHTTP waits for url to answer 200 (with a bearer token and CA pool
// when given).
func (n *Node) waitHTTP(ctx context.Context, what, url, token string, pool *x509.CertPool) error {
	c := &http.Client{Timeout: 2 * time.Second}
	if pool != nil {
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	defer c.CloseIdleConnections()
	return n.poll(ctx, what, 100*time.Millisecond, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return false, err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s: %s", url, resp.Status, body)
		}
		return true, nil
	})
}

// importPause builds the pause program, writes its image and imports it,
// once containerd answers.
func (n *Node) importPause(ctx context.Context) error {
	bin := filepath.Join(n.l.images(), "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin,
		"github.com/magnetar-dev/magnetar/e2e/kubenode/pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubenode: building the pause program: %v\n%s", err, out)
	}
	archive := filepath.Join(n.l.images(), "pause.tar")
	if _, err := ociimage.Write(archive, ociimage.Spec{
		Ref:        PauseImage,
		Files:      []ociimage.File{{Path: "/pause", Source: bin}},
		Entrypoint: []string{"/pause"},
	}); err != nil {
		return err
	}
	if err := n.poll(ctx, "containerd", 100*time.Millisecond, func() (bool, error) {
		err := criReady(ctx, n.l.containerdSock())
		return err == nil, err
	}); err != nil {
		return err
	}
	return n.ImportImage(ctx, archive)
}

// waitReady waits for the Node to report Ready.
func (n *Node) waitReady(ctx context.Context) error {
	return n.poll(ctx, "node "+n.cfg.NodeName+" Ready", 200*time.Millisecond, func() (bool, error) {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return true, nil
				}
				return false, fmt.Errorf("Ready %s: %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return false, errors.New("no Ready condition yet")
	})
}

// WaitServiceAccount waits for namespace's default ServiceAccount, which
// the controller-manager creates a few seconds after the namespace; pods
// are refused until it exists.
func (n *Node) WaitServiceAccount(ctx context.Context, namespace string) error {
	return n.poll(ctx, "ServiceAccount "+namespace+"/default", 200*time.Millisecond, func() (bool, error) {
		_, err := n.client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// ImportImage imports an image archive (internal/ociimage's, or any
// `docker save` archive) into containerd's k8s.io namespace, where kubelet
// finds it; pods using it need imagePullPolicy Never (or IfNotPresent).
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.l.containerdSock(), "--namespace", "k8s.io",
		"images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubenode: ctr images import %s: %v: %s", archive, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Client returns a clientset acting as a cluster administrator.
func (n *Node) Client() kubernetes.Interface { return n.client }

// RESTConfig returns a copy of the administrator's client configuration.
func (n *Node) RESTConfig() *rest.Config { return rest.CopyConfig(n.restCfg) }

// Kubeconfig returns the path of the administrator's kubeconfig file.
func (n *Node) Kubeconfig() string { return n.l.path("admin.kubeconfig") }

// Server returns the apiserver's URL.
func (n *Node) Server() string { return n.server }

// Dir returns the node's directory.
func (n *Node) Dir() string { return n.cfg.Dir }

// HostIP returns the node's address on the pod bridge, from which pods
// are reachable.
func (n *Node) HostIP() string { return n.sn.host.String() }

// NodeName returns the Node's name.
func (n *Node) NodeName() string { return n.cfg.NodeName }

// Logs returns the last n bytes of each process's log, for a failing
// test's report.
func (n *Node) Logs(bytes int64) map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]string{}
	for name, p := range n.procs {
		out[name] = p.tail(bytes)
	}
	return out
}

// Stop tears the node down and puts the host back as it was: controllers
// and kubelet first, then every pod sandbox (through the CRI, while
// containerd runs), containerd, the apiserver, then etcd, and last the
// host changes (mounts, bridge, cgroups, sysctls, iptables chains, Dir when
// Start created it). It goes on past errors and returns them all.
func (n *Node) Stop(ctx context.Context) error {
	var errs []error
	stop := func(name string, grace time.Duration) {
		n.mu.Lock()
		p := n.procs[name]
		n.mu.Unlock()
		if p != nil {
			errs = append(errs, p.stop(grace))
		}
	}
	stop("kube-controller-manager", 5*time.Second)
	stop("kube-scheduler", 5*time.Second)
	stop("kubelet", 10*time.Second)
	n.mu.Lock()
	ctrd := n.procs["containerd"]
	n.mu.Unlock()
	if ctrd != nil && !ctrd.exited() {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		errs = append(errs, removeAllSandboxes(cctx, n.l.containerdSock()))
		cancel()
	}
	stop("containerd", 10*time.Second)
	// The apiserver before its etcd: the other way round it retries etcd
	// for minutes before it exits.
	stop("kube-apiserver", 10*time.Second)
	stop("etcd", 10*time.Second)
	if n.host != nil {
		errs = append(errs, restoreHost(n.host, n.cfg.Log))
		if err := os.Remove(stateFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if n.lock != nil {
		errs = append(errs, n.lock.Release())
	}
	return errors.Join(errs...)
}
