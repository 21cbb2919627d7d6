// Package pyinstancetest is for tests that run Python functions on a
// worker: Require skips them when python3 lacks the Python instance's
// packages, or fails them where those packages must be there.
package pyinstancetest

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv set to 1 (as .ci/run does once it installed the packages)
// makes a missing package a failure instead of a skip.
const RequireEnv = "MAGNETAR_REQUIRE_PYTHON_PULSAR"

// Modules are what the instance imports at run time
// (dataplane/functions/pyinstance/requirements.txt).
const Modules = "pulsar, google.protobuf, h2"

// Require skips t when python3 cannot import Modules, or fails it under
// RequireEnv=1.
func Require(t testing.TB) {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import "+Modules).CombinedOutput()
	if err == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("python3 lacks the Python instance's packages: %v: %s", err, out)
	}
	t.Skipf("python3 lacks the Python instance's packages (dataplane/functions/pyinstance/requirements.txt): %s", out)
}
