// Command pause is the sandbox container of the test node's pods (the
// image containerd's sandbox_image names): it holds the pod's namespaces
// open, reaps the orphans that are re-parented to it when a pod shares
// its PID namespace, and exits on SIGTERM or SIGINT. kubenode builds it
// with CGO_ENABLED=0 and imports it as an image before kubelet starts, so
// no sandbox image is ever pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited; signals coalesce, so one
// SIGCHLD may stand for several.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
