package standalone_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// TestPythonClient runs the pytest suite in e2e/clients/python (the Apache
// Pulsar Python client, a binding of the C++ client libpulsar) against an
// in-process standalone. It is skipped when python3 cannot import pulsar
// (pip install pulsar-client) or pytest.
func TestPythonClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an external client")
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "e2e", "clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("python3", "-c", "import pulsar, pytest").CombinedOutput(); err != nil {
		t.Skipf("python3 cannot import pulsar and pytest (pip install pulsar-client pytest): %v\n%s", err, out)
	}
	sa := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", dir)
	cmd.Env = append(os.Environ(), "MAGNETAR_SERVICE_URL="+sa.ServiceURL())
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}
