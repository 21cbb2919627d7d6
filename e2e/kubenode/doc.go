// Package kubenode runs one real Kubernetes v1.37.2 node on this machine
// for tests: its own etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd and kubelet, all in one temporary directory,
// reachable only on loopback and on a pod bridge of its own.
//
// What it owns:
//   - the binaries: setup.sh (beside this file) builds the Kubernetes
//     commands and etcd from the Go module proxy into
//     ~/.cache/magnetar/kube-v1.37.2/bin (or $MAGNETAR_KUBE_HOME/bin) and
//     installs containerd, runc, the CNI plugins and iptables from Debian;
//     Locate finds them, Require skips a test without them, or fails it
//     under MAGNETAR_REQUIRE_KUBE=1;
//   - the node's configuration, written into Config.Dir: a CA and the
//     apiserver's serving certificate (internal/pki), a service-account
//     key pair, one bearer token per component (--token-auth-file;
//     authorization Node,RBAC), a kubeconfig per component, containerd's
//     config.toml (own root, state, socket and runc root; the sandbox
//     image is kubenode's own pause image; restrict_oom_score_adj because
//     root lacks CAP_SYS_RESOURCE here), a CNI conflist (bridge plus
//     host-local on Config.Subnet, no gateway, no masquerade, IPAM state
//     in Dir) and the KubeletConfiguration (cgroupfs, failCgroupV1 false:
//     the machine has cgroup v1 and no systemd);
//   - the processes: Start runs them in that order, each in a process
//     group of its own with its output in Dir/logs/<name>.log, and returns
//     once the node is Ready and the default ServiceAccount exists; Stop
//     stops the controllers and kubelet, removes every pod sandbox through
//     containerd's CRI socket, stops containerd, then the apiserver before
//     its etcd;
//   - the host: the bridge (Config.Bridge, the host at .1 of the subnet),
//     and what kubelet changes on the host (six sysctls, iptables chains
//     such as KUBE-FIREWALL, its cgroups, /var/log/containers) are
//     recorded before and restored by Stop, which also unmounts whatever
//     is left under Dir. The record is kept in /run/magnetar-kubenode
//     while a node runs: a Start that finds one left by a process that
//     died first restores the host from it.
//
// One node runs on a machine at a time (the host changes are global):
// Start waits, until its context ends, for a node of another process to
// stop. Pods get addresses .2-.127 of the subnet; Service cluster IPs are
// .128/25 of the same subnet, so nothing sent to one leaves the machine
// (there is no kube-proxy: reach pods by their IPs). IP forwarding stays
// off and pods have no default route.
//
// Images come without a registry: ImportImage imports an archive written
// by internal/ociimage with `ctr -n k8s.io images import`; pods use
// imagePullPolicy Never.
//
// Callers: tests (Run), and later the Kubernetes provisioner's tests.
// Concurrency: a Node's methods are safe for concurrent use, except that
// Stop must be called once, after every other call returned.
package kubenode
