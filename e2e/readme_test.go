package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestREADMERestWalkthrough runs the README's REST walk-through (the sh
// block starting "# REST walk-through") as written against `magnetar up`,
// with only the API address and the data directory replaced, then produces
// and consumes on the cluster URL it printed.
func TestREADMERestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH: the walk-through needs it", tool)
		}
	}
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script := shellBlock(t, string(raw), "# REST walk-through")
	dir := t.TempDir()
	killDataPlaneOnCleanup(t, dir)
	addr := FreeAddr(t)
	up := Start(t, "up", "up", "--data-dir", dir, "--listen", addr)
	interruptOnCleanup(t, up)
	up.WaitListening(addr, 30*time.Second)
	readKey(t, filepath.Join(dir, "bootstrap.key"))
	script = strings.ReplaceAll(script, "http://127.0.0.1:7080", "http://"+addr)
	script = strings.ReplaceAll(script, "data/up/", dir+"/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("walk-through output:\n%s", out)
	if err != nil {
		t.Fatalf("README REST walk-through: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	url := lines[len(lines)-1]
	if !strings.HasPrefix(url, "pulsar+ssl://") {
		t.Fatalf("the walk-through's last line is %q, want the cluster's pulsar+ssl:// URL", url)
	}
	// As the text after the block says: its trust file and the oauth2
	// plugin with the key file it wrote.
	a := clusterAccess{serviceURL: url, caFile: filepath.Join(dir, "globex-web-ca.pem"),
		oauth2: map[string]string{"type": "client_credentials", "issuerUrl": "http://" + addr,
			"audience": "urn:magnetar:cluster:globex/web", "privateKey": "file://" + filepath.Join(dir, "oauth2.json")}}
	roundTrip(t, a, "persistent://shop/orders/readme")
	// Without the plugin the cluster refuses the client.
	a.oauth2 = nil
	anon := a.options()
	anon.OperationTimeout = refusedWithin
	cl, err := pulsar.NewClient(anon)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://shop/orders/readme"}); err == nil {
		t.Fatal("an anonymous client produced on the walk-through's cluster")
	}
}

// shellBlock returns the fenced sh block of md whose first line starts
// with first.
func shellBlock(t *testing.T, md, first string) string {
	t.Helper()
	for _, part := range strings.Split(md, "```sh\n")[1:] {
		body, _, ok := strings.Cut(part, "```")
		if ok && strings.HasPrefix(body, first) {
			return body
		}
	}
	t.Fatalf("no sh block starting %q", first)
	return ""
}

// TestWalkthroughsUseDistinctOrganizations: the README's CLI quick start,
// its REST walk-through, the Terraform quickstart and docs/billing.md's
// walk-through each create an organization of their own, so a user who
// follows them in order on one `magnetar up` never meets ALREADY_EXISTS.
func TestWalkthroughsUseDistinctOrganizations(t *testing.T) {
	read := func(p string) string {
		raw, err := os.ReadFile(filepath.Join("..", p))
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	readme := read("README.md")
	cliStart := shellBlock(t, readme, "go run ./cmd/magnetar up &")
	orgCreate := regexp.MustCompile(`magnetar org create ([a-z][a-z0-9-]*)`)
	sources := []struct {
		what, text string
		re         *regexp.Regexp
	}{
		{"README.md's CLI quick start", cliStart, orgCreate},
		{"README.md's REST walk-through", shellBlock(t, readme, "# REST walk-through"), regexp.MustCompile(`organizationId=([a-z][a-z0-9-]*)`)},
		{"terraform/examples/quickstart", read("terraform/examples/quickstart/main.tf"), regexp.MustCompile(`organization_id\s*=\s*"([a-z][a-z0-9-]*)"`)},
		{"docs/billing.md", read("docs/billing.md"), orgCreate},
	}
	creator := map[string]string{}
	for _, src := range sources {
		ms := src.re.FindAllStringSubmatch(src.text, -1)
		if len(ms) == 0 {
			t.Errorf("%s creates no organization", src.what)
		}
		for _, m := range ms {
			if prev, ok := creator[m[1]]; ok && prev != src.what {
				t.Errorf("organization %q is created by %s and by %s", m[1], prev, src.what)
			}
			creator[m[1]] = src.what
		}
	}
}
