package cli

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// expiringOperations answers every wait with DEADLINE_EXCEEDED at once, as
// a server does that runs out of the deadline the client sent along a
// moment before the client's own context ends.
type expiringOperations struct {
	cpv1.UnimplementedOperationsServer
}

func (expiringOperations) WaitOperation(context.Context, *cpv1.WaitOperationRequest) (*cpv1.Operation, error) {
	return nil, status.Error(codes.DeadlineExceeded, "deadline exceeded")
}

// TestWaitServerDeadlineIsTimeout: a DEADLINE_EXCEEDED from the server while
// the command's --timeout runs out is reported as the timeout, with the
// command that resumes the wait.
func TestWaitServerDeadlineIsTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	cpv1.RegisterOperationsServer(srv, expiringOperations{})
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := &session{conn: conn, out: io.Discard, errOut: io.Discard}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	op := &cpv1.Operation{Name: "operations/op-1", Type: "CreateCluster", Target: "organizations/acme/clusters/dev", State: cpv1.Operation_PENDING}
	_, err = s.wait(ctx, op)
	if err == nil || !strings.Contains(err.Error(), "--timeout reached") || !strings.Contains(err.Error(), "magnetar operation wait ") {
		t.Fatalf("wait = %v, want the --timeout message", err)
	}
}
