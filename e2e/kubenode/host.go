package kubenode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sysctls are the kernel settings kubelet rewrites at start (its
// "protect kernel defaults" set), and IP forwarding, which nothing here
// should turn on; their values are recorded before and written back.
var sysctls = []string{
	"kernel/panic",
	"kernel/panic_on_oops",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward",
}

// hostPaths are host directories kubelet, containerd or the CNI plugins
// create outside Dir whatever their configuration says (containerd's shim
// sockets under /run/containerd/s, the CNI result cache, kubelet's
// /var/log/containers links and its device-plugin socket in
// /var/lib/kubelet/device-plugins). One that did not exist before the node
// is removed after it, when nothing but empty directories, sockets and
// links into Dir are left in it.
var hostPaths = []string{
	"/run/containerd",
	"/var/lib/cni",
	"/var/lib/kubelet",
	"/var/log/containers",
	"/var/log/pods",
}

// cgroupRoot holds the cgroup v1 hierarchies, one directory per mount.
const cgroupRoot = "/sys/fs/cgroup"

// kubeletCgroups are the top-level cgroups kubelet creates with the
// cgroupfs driver in each hierarchy.
var kubeletCgroups = []string{"kubepods"}

// hostState is what Start found on the host before it changed anything,
// and what it changed: enough for Stop, or a later Start after this
// process died, to put the host back.
type hostState struct {
	PID        int                 `json:"pid"`
	Dir        string              `json:"dir"`
	RemoveDir  bool                `json:"remove_dir"`
	Bridge     string              `json:"bridge"`
	Sysctls    map[string]string   `json:"sysctls"`
	Chains     map[string][]string `json:"chains"` // "iptables filter" -> chains
	NewPaths   []string            `json:"new_paths"`
	NewCgroups []string            `json:"new_cgroups"`
}

// snapshotHost records the host before the node changes it.
func snapshotHost(st *hostState) error {
	st.PID = os.Getpid()
	st.Sysctls = map[string]string{}
	for _, k := range sysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("kubenode: %w", err)
		}
		st.Sysctls[k] = strings.TrimSpace(string(b))
	}
	st.Chains = map[string][]string{}
	for _, tool := range iptablesTools() {
		tables, err := listChains(tool)
		if err != nil {
			return err
		}
		for table, chains := range tables {
			st.Chains[tool+" "+table] = chains
		}
	}
	st.NewPaths = nil
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			st.NewPaths = append(st.NewPaths, p)
		}
	}
	st.NewCgroups = nil
	hier, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	for _, h := range hier {
		if !h.IsDir() {
			continue
		}
		for _, c := range kubeletCgroups {
			p := filepath.Join(cgroupRoot, h.Name(), c)
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				st.NewCgroups = append(st.NewCgroups, p)
			} else if err == nil {
				return fmt.Errorf("kubenode: %s exists: another kubelet runs on this machine, or one left it", p)
			}
		}
	}
	return nil
}

// restoreHost puts back what st recorded, after every process of the node
// has stopped (or died): it kills what is left running, unmounts everything
// under the node's directory, deletes the bridge, the cgroups and the host
// directories the node created, writes the sysctls back and removes the
// iptables chains that appeared. It goes on after an error and returns
// them all. What it changes back is logged to log.
func restoreHost(st *hostState, log *slog.Logger) error {
	var errs []error
	if st.Dir != "" {
		errs = append(errs, killDirProcs(st.Dir))
	}
	errs = append(errs, killCgroupProcs(st.NewCgroups))
	if st.Dir != "" {
		errs = append(errs, unmountUnder(st.Dir))
	}
	if st.Bridge != "" {
		errs = append(errs, deleteLink(st.Bridge))
	}
	errs = append(errs, removeCgroups(st.NewCgroups))
	for _, p := range st.NewPaths {
		errs = append(errs, removeLeftTree(p, st.Dir))
	}
	keys := make([]string, 0, len(st.Sysctls))
	for k := range st.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := filepath.Join("/proc/sys", k)
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == st.Sysctls[k] {
			continue
		}
		if err := os.WriteFile(p, []byte(st.Sysctls[k]+"\n"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("kubenode: restoring %s: %w", k, err))
			continue
		}
		log.Info("kubenode: sysctl restored", "key", k, "found", strings.TrimSpace(string(b)), "restored", st.Sysctls[k])
	}
	for _, tool := range iptablesTools() {
		before := map[string][]string{}
		for k, v := range st.Chains {
			if t, table, ok := strings.Cut(k, " "); ok && t == tool {
				before[table] = v
			}
		}
		errs = append(errs, removeNewChains(tool, before, log))
	}
	if st.RemoveDir && st.Dir != "" {
		if err := os.RemoveAll(st.Dir); err != nil {
			errs = append(errs, fmt.Errorf("kubenode: %w", err))
		}
	}
	return errors.Join(errs...)
}

// killDirProcs SIGKILLs every process whose command line names dir (the
// node's processes when their parent died without stopping them, and the
// containerd shims, which outlive containerd by design: their -address is
// the socket in dir) and waits for them to go.
func killDirProcs(dir string) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if arg == dir || strings.Contains(arg, dir+"/") {
				pids = append(pids, pid)
				break
			}
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitGone(pids)
	return nil
}

// waitGone waits up to 5 s for the processes to exit (zombies count as
// gone: their parent reaps them).
func waitGone(pids []int) {
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !isZombie(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// killCgroupProcs SIGKILLs every process left in the given cgroups and
// their children (containers whose shim is gone), then waits briefly for
// them to leave.
func killCgroupProcs(cgroups []string) error {
	var pids []int
	for _, cg := range cgroups {
		_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitGone(pids)
	return nil
}

// isZombie reports whether pid has exited but not been reaped.
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("kubenode: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMount decodes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount at or below dir (overlay root
// filesystems, network namespaces, pod volumes), repeating while stacked
// mounts remain.
func unmountUnder(dir string) error {
	for range 10 {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
	mps, _ := mountsUnder(dir)
	return fmt.Errorf("kubenode: still mounted under %s: %v", dir, mps)
}

// removeCgroups removes each cgroup tree, leaves first.
func removeCgroups(cgroups []string) error {
	var errs []error
	for _, cg := range cgroups {
		var dirs []string
		_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			for range 50 {
				// A cgroup whose last process is exiting is busy for a moment.
				if err = unix.Rmdir(dirs[i]); err == nil || errors.Is(err, unix.ENOENT) || !errors.Is(err, unix.EBUSY) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("kubenode: removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeLeftTree removes p if it holds nothing but directories, sockets,
// symbolic links pointing into dir (or nowhere) and CNI result files of
// the node's network; anything else is left, with an error naming it.
func removeLeftTree(p, dir string) error {
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var others []string
	var dirs []string
	err := filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, q)
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(q)
			if _, statErr := os.Stat(q); statErr != nil || (dir != "" && strings.HasPrefix(target, dir+"/")) {
				_ = os.Remove(q)
			} else {
				others = append(others, q)
			}
		case d.Type()&os.ModeSocket != 0:
			// A socket of the node's processes: a shim's, left when the
			// shim was killed, or kubelet's device-plugin socket.
			_ = os.Remove(q)
		case d.Type().IsRegular() && filepath.Dir(q) == "/var/lib/cni/results" &&
			(strings.HasPrefix(d.Name(), cniNetwork+"-") || strings.HasPrefix(d.Name(), "cni-loopback-")):
			// The CNI result cache of a pod of the node's network (and of
			// the loopback network containerd adds), left when its sandbox
			// was never torn down (a node whose process died).
			_ = os.Remove(q)
		default:
			others = append(others, q)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	if len(others) > 0 {
		return fmt.Errorf("kubenode: %s was created while the node ran and still holds %v", p, others)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil {
			return fmt.Errorf("kubenode: %w", err)
		}
	}
	return nil
}

// createBridge adds the pod bridge with addr (CIDR notation) and brings it
// up; the CNI bridge plugin then attaches pods to it.
func createBridge(name, addr string) error {
	if err := run("ip", "link", "add", name, "type", "bridge"); err != nil {
		return err
	}
	if err := run("ip", "addr", "add", addr, "dev", name); err != nil {
		return err
	}
	return run("ip", "link", "set", name, "up")
}

// deleteLink deletes a network link; one already gone is no error.
func deleteLink(name string) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return run("ip", "link", "del", name)
}

// run runs a command, its output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubenode: %s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// stateDir holds the lock and the host record of the node that runs.
const stateDir = "/run/magnetar-kubenode"

// stateFile is the host record in stateDir.
var stateFile = filepath.Join(stateDir, "host.json")

// saveState writes st to stateFile.
func saveState(st *hostState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	tmp := stateFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("kubenode: %w", err)
	}
	return os.Rename(tmp, stateFile)
}

// loadState reads a record left by a node whose process died before its
// Stop; nil when there is none.
func loadState() (*hostState, error) {
	b, err := os.ReadFile(stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubenode: %w", err)
	}
	st := &hostState{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("kubenode: %s: %w", stateFile, err)
	}
	return st, nil
}
