package kubenode

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// dialCRI connects to containerd's CRI service on its socket.
func dialCRI(sock string) (*grpc.ClientConn, runtimeapi.RuntimeServiceClient, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("kubenode: CRI %s: %w", sock, err)
	}
	return conn, runtimeapi.NewRuntimeServiceClient(conn), nil
}

// criReady returns nil once containerd answers CRI calls on sock.
func criReady(ctx context.Context, sock string) error {
	conn, rt, err := dialCRI(sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = rt.Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// removeAllSandboxes stops and removes every pod sandbox containerd runs,
// with its containers: the containers are killed, the CNI plugins release
// the pod's address and veth, the network namespace and the root
// filesystems are unmounted, and the shims exit. kubelet must be stopped
// first, or it starts the pods again.
func removeAllSandboxes(ctx context.Context, sock string) error {
	conn, rt, err := dialCRI(sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("kubenode: listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("kubenode: stopping sandbox of %s/%s: %w", s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("kubenode: removing sandbox of %s/%s: %w", s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
		}
	}
	return errors.Join(errs...)
}
