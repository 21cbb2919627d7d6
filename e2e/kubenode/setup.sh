#!/usr/bin/env bash
# setup.sh puts in place what package kubenode needs to run one real
# Kubernetes v1.37.2 node on this machine:
#
#   e2e/kubenode/setup.sh [HOME_DIR]
#
# HOME_DIR defaults to $MAGNETAR_KUBE_HOME, else
# $HOME/.cache/magnetar/kube-v1.37.2. The last line on stdout is HOME_DIR's
# bin/ directory; progress goes to stderr. Layout (kubenode.Locate reads it):
#
#   bin/   kube-apiserver kube-controller-manager kube-scheduler kubelet
#          kubectl (v1.37.2, version ldflags set, -s -w), etcd (v3.7.0,
#          the release k8s.io/kubernetes v1.37.2 requires), crictl (v1.37.0,
#          for debugging; its absence is not an error)
#   src/   the wrapper module the binaries are built from: a go.mod that
#          requires k8s.io/kubernetes v1.37.2 and replaces every staging
#          module (k8s.io/api, k8s.io/client-go, ...) it points at
#          ./staging/src with the published v0.37.2 module, and main.go,
#          etcd's main (etcdmain.Main). It lives here, never in the
#          repository's go.mod.
#
# From Debian (apt-get, as root), when missing: containerd (1.6), runc,
# containernetworking-plugins (/usr/lib/cni), iptables and nftables (nft
# deletes the nf_tables tables kubelet's iptables calls created). The package's
# own containerd service is stopped: the harness runs its own containerd on
# its own socket.
#
# Idempotent: a binary already in bin/ is not rebuilt and an installed
# package is not reinstalled. Binaries are linked into a temporary name
# and renamed, so bin/ never holds a half-written one. Cold, on 2 cores:
# about 10 minutes on an idle machine, 39 measured while other builds ran
# (kube-apiserver alone 7-27 minutes, 2.8 GB of memory); with Go's build
# cache warm, 20-30 s per binary (linking only); with bin/ complete,
# instant. CI keeps bin/ when it keeps this directory (MAGNETAR_KUBE_HOME
# may point into a cached one).
#
# Needs: go (1.26), bash, and root for apt-get.
set -euo pipefail

kube_version=v1.37.2
staging_version=v0.37.2
etcd_version=v3.7.0
crictl_version=v1.37.0

home=${1:-${MAGNETAR_KUBE_HOME:-$HOME/.cache/magnetar/kube-$kube_version}}
while [[ $home == */ && $home != / ]]; do home=${home%/}; done
mkdir -p "$home/bin" "$home/src"
home=$(cd "$home" && pwd)
bin=$home/bin
src=$home/src

log() { printf 'kubenode setup: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v go >/dev/null || die "go not found"

# Debian packages. dpkg-query tells installed ones apart from ones only
# known to dpkg (removed, config files left).
missing=()
for p in containerd runc containernetworking-plugins iptables nftables; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || die "not root: install ${missing[*]} with apt-get"
  log "installing ${missing[*]} from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; } ||
    die "apt-get could not install ${missing[*]}"
  # The package may have started containerd on /run/containerd; the harness
  # starts its own, so the system one is stopped (it is not needed).
  if [[ " ${missing[*]} " == *" containerd "* ]] && command -v service >/dev/null; then
    service containerd stop >/dev/null 2>&1 || true
  fi
fi
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
  die "CNI plugins missing from /usr/lib/cni (containernetworking-plugins)"

kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
need=()
for c in "${kube_cmds[@]}" etcd; do
  [[ -x $bin/$c ]] || need+=("$c")
done

if ((${#need[@]})); then
  # The wrapper module. k8s.io/kubernetes's go.mod replaces each staging
  # module with a directory of its own tree, which a module download does
  # not have; each replace is pointed at the published module instead.
  # .complete marks a module whose go get and go mod tidy both finished.
  if [[ ! -f $src/.complete ]]; then
    log "writing the wrapper module in $src"
    rm -f "$src/go.mod" "$src/go.sum" "$src/main.go"
    kmod=$(go mod download -json "k8s.io/kubernetes@$kube_version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    [[ -f $kmod ]] || die "go mod download k8s.io/kubernetes@$kube_version gave no go.mod"
    staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$kmod" |
      grep -v -e '^k8s.io/sample-cli-plugin$' -e '^k8s.io/sample-controller$' | sort -u)
    [[ -n $staging ]] || die "no staging replace lines in $kmod"
    (
      cd "$src"
      {
        printf 'module magnetar.local/kubebuild\n\ngo 1.26.0\n\n'
        for m in $staging; do printf 'replace %s => %s %s\n' "$m" "$m" "$staging_version"; done
      } >go.mod
      cat >main.go <<'EOF'
// Command etcd is etcd's server, built inside this wrapper module because
// go.etcd.io/etcd/server/v3 cannot be installed with go install.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
      go get "go.etcd.io/etcd/server/v3@$etcd_version" >&2
      go get -tool $(printf "k8s.io/kubernetes/cmd/%s@$kube_version " "${kube_cmds[@]}") >&2
      go mod tidy >&2
      touch .complete
    )
  fi
  # Without these the binaries call themselves v0.0.0-master+$Format:%H$,
  # which kubectl version cannot parse.
  major=${kube_version#v}
  minor=${major#*.}
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube_version"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=${major%%.*}"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
  for c in "${need[@]}"; do
    start=$SECONDS
    log "building $c"
    if [[ $c == etcd ]]; then
      pkg=.
      flags="-s -w"
    else
      pkg=k8s.io/kubernetes/cmd/$c
      flags=$ldflags
    fi
    (cd "$src" && go build -ldflags "$flags" -o "$bin/.$c.tmp" "$pkg") ||
      die "building $c failed"
    mv "$bin/.$c.tmp" "$bin/$c"
    log "built $c in $((SECONDS - start)) s"
  done
fi

if [[ ! -x $bin/crictl ]]; then
  log "building crictl $crictl_version"
  if GOBIN=$bin go install -ldflags "-s -w" "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version" >&2; then
    :
  else
    log "crictl could not be built (optional: only for debugging)"
  fi
fi

log "binaries in $bin"
printf '%s\n' "$bin"
