package terraform_test

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite terraform/docs from the provider's schema and examples/")

// tfplugindocs is the pinned terraform-plugin-docs command that renders
// the docs; `go run` fetches and builds it like any module.
const tfplugindocs = "github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs@v0.24.0"

// TestDocsUpToDate renders the provider's documentation with
// terraform-plugin-docs from the schema (exported by the Terraform CLI
// from the provider binary built here) and examples/, and compares it
// with docs/. `go test ./terraform -run TestDocsUpToDate -update`
// rewrites docs/.
func TestDocsUpToDate(t *testing.T) {
	cli := findCLI(t)
	tmp := t.TempDir()

	// The provider binary, answering for its source address through a
	// dev override.
	bin := filepath.Join(tmp, "bin")
	run(t, "", "go", "build", "-o", filepath.Join(bin, "terraform-provider-magnetar"), "../cmd/terraform-provider-magnetar")
	rc := filepath.Join(tmp, "terraformrc")
	writeFile(t, rc, "provider_installation {\n  dev_overrides {\n    \"magnetar-dev/magnetar\" = \""+bin+"\"\n  }\n  direct {}\n}\n")
	work := filepath.Join(tmp, "work")
	writeFile(t, filepath.Join(work, "main.tf"), "terraform {\n  required_providers {\n    magnetar = { source = \"magnetar-dev/magnetar\" }\n  }\n}\n")
	cmd := exec.Command(cli, "providers", "schema", "-json")
	cmd.Dir, cmd.Env = work, append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "CHECKPOINT_DISABLE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	schema, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s providers schema -json: %v\n%s", cli, err, stderr.String())
	}
	// tfplugindocs looks the provider up by its short name under the
	// default namespace.
	for _, host := range []string{"registry.terraform.io", "registry.opentofu.org"} {
		schema = bytes.ReplaceAll(schema, []byte(`"`+host+`/magnetar-dev/magnetar"`), []byte(`"registry.terraform.io/hashicorp/magnetar"`))
	}
	writeFile(t, filepath.Join(tmp, "schema.json"), string(schema))

	// Render from a copy of examples/ into tmp/site/docs.
	site := filepath.Join(tmp, "site")
	copyTree(t, "examples", filepath.Join(site, "examples"))
	run(t, "", "go", "run", tfplugindocs, "generate", "--provider-dir", site, "--provider-name", "magnetar",
		"--providers-schema", filepath.Join(tmp, "schema.json"))
	got := readTree(t, filepath.Join(site, "docs"))
	if len(got) == 0 {
		t.Fatal("tfplugindocs rendered nothing")
	}
	if *update {
		os.RemoveAll("docs")
		for name, body := range got {
			writeFile(t, filepath.Join("docs", name), body)
		}
		return
	}
	want := readTree(t, "docs")
	for name, body := range got {
		if want[name] != body {
			t.Errorf("docs/%s is out of date: run go test ./terraform -run TestDocsUpToDate -update", name)
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("docs/%s is not generated any more: run go test ./terraform -run TestDocsUpToDate -update", name)
		}
	}
}

// findCLI returns the Terraform or OpenTofu CLI the tests use, or skips.
func findCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"terraform", "tofu"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Terraform CLI: neither terraform nor tofu is on PATH and TF_ACC_TERRAFORM_PATH is unset (.ci/run installs OpenTofu)")
	return ""
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readTree reads every file under dir, keyed by its slash path below dir.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(raw)
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	for name, body := range readTree(t, from) {
		writeFile(t, filepath.Join(to, name), body)
	}
}
