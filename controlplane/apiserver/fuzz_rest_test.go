package apiserver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	cpv1 "github.com/magnetar-dev/magnetar/api/controlplane/v1"
)

// schemathesisPin is the schemathesis release the REST fuzz test is run
// with in CI (.ci/run installs it).
const schemathesisPin = "schemathesis==4.32.5"

// TestRESTFuzz drives the REST API with schemathesis, generating requests
// (valid and invalid ones) from the served OpenAPI 3 document with the
// operator's key, against a server holding one organization, region and
// cluster. Every answer must be below 500 and match the document (the
// checks below). Each operation gets 5 generated cases per phase (about a
// minute in all, with the race detector too);
// MAGNETAR_SCHEMATHESIS_EXAMPLES=N asks for N, for a longer search by hand.
// It skips when schemathesis is not on PATH, unless
// MAGNETAR_REQUIRE_SCHEMATHESIS=1.
func TestRESTFuzz(t *testing.T) {
	bin, err := exec.LookPath("schemathesis")
	if err != nil {
		if os.Getenv("MAGNETAR_REQUIRE_SCHEMATHESIS") == "1" {
			t.Fatalf("schemathesis not on PATH and MAGNETAR_REQUIRE_SCHEMATHESIS=1 (pip install '%s')", schemathesisPin)
		}
		t.Skipf("schemathesis not on PATH: pip install '%s' to run the REST fuzz test", schemathesisPin)
	}
	h := newHarness(t, "sqlite::memory:")
	h.setup("fuzz")
	op := h.authCtx(h.opKey)
	must[*cpv1.Operation](t)(h.clusters.CreateCluster(op, &cpv1.CreateClusterRequest{
		Parent: "organizations/fuzz", ClusterId: "c1", Cluster: &cpv1.Cluster{Region: "regions/us-east"}}))

	examples, timeout := "5", 3*time.Minute
	if n := os.Getenv("MAGNETAR_SCHEMATHESIS_EXAMPLES"); n != "" {
		examples, timeout = n, 30*time.Minute
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	dir := t.TempDir()
	// Path parameters name the resources made above, so requests reach
	// past the NOT_FOUND of a random name into the handlers.
	config := `[parameters]
organization = "fuzz"
region = "us-east"
cluster = "c1"
serviceAccount = "admin"
roleBinding = "admin"
`
	if err := os.WriteFile(filepath.Join(dir, "schemathesis.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "--config-file", filepath.Join(dir, "schemathesis.toml"), "run", h.base+"/v3/openapi.json",
		"--url", h.base,
		// No 5xx; responses (status, content type, body) as the document
		// says; unsupported methods 405 with Allow; calls without the key
		// refused; deleted resources gone, created ones there.
		"--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,"+
			"unsupported_method,ignored_auth,missing_required_header,use_after_free,ensure_resource_availability",
		"--max-examples", examples,
		"--seed", "31",
		"--workers", "2",
		"--request-timeout", "20",
		"--suppress-health-check", "all",
		// The long-polls wait up to their timeout (minutes) when nothing
		// changes: past the per-request timeout, not a server error.
		"--exclude-operation-id", "RegionAgent_WatchDesiredState",
		"--exclude-operation-id", "Operations_WaitOperation",
		"--header", "Authorization: Bearer "+h.opKey,
		"--report", "junit", "--report-dir", dir,
	)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "SCHEMATHESIS_HOOKS=")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("schemathesis did not finish in time:\n%s", out)
	}
	if err != nil {
		t.Fatalf("schemathesis: %v\n%s", err, out)
	}
	if reports, _ := filepath.Glob(filepath.Join(dir, "junit*.xml")); len(reports) == 0 {
		t.Fatalf("schemathesis wrote no report:\n%s", out)
	}
	t.Logf("schemathesis:\n%s", out)
}
