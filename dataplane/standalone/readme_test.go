package standalone_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-dev/magnetar/dataplane/standalone/standalonetest"
)

// goBlock matches a fenced Go code block of a Markdown file; group 1 is its
// text.
var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```$")

// TestREADMEGoSnippet runs the Go program of the repository's README.md as
// written, with `go run` inside this module (so it builds against the
// pulsar-client-go of go.mod), against a standalone of its own named by
// $MAGNETAR_SERVICE_URL. The program must exit 0 within the timeout, print
// what it received, and its message must be on this standalone's topic.
func TestREADMEGoSnippet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllSubmatch(readme, -1)
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d ```go blocks, want the one program", len(blocks))
	}
	prog := filepath.Join(t.TempDir(), "main.go")
	if err := os.WriteFile(prog, blocks[0][1], 0o644); err != nil {
		t.Fatal(err)
	}

	sa := standalonetest.Start(t, standalonetest.Config(t.TempDir(), standalonetest.FreeAddr(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", prog)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "MAGNETAR_SERVICE_URL="+sa.ServiceURL())
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run README.md's program: %v (after %v)\nstdout:\n%s\nstderr:\n%s", err, time.Since(start), stdout.String(), stderr.String())
	}
	t.Logf("README.md's program ran in %v (build included)", time.Since(start))
	if got, want := stdout.String(), "received \"hello\"\n"; got != want {
		t.Fatalf("README.md's program printed %q, want %q\nstderr:\n%s", got, want, stderr.String())
	}

	c := standalonetest.NewClient(t, sa.ServiceURL())
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: "my-topic", StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	m, err := r.Next(rctx)
	if err != nil {
		t.Fatalf("reading my-topic of the test's standalone: %v", err)
	}
	if string(m.Payload()) != "hello" {
		t.Fatalf("my-topic's first message = %q, want \"hello\"", m.Payload())
	}
}
